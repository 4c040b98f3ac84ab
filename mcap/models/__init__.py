"""Built-in models and user models, each an ``nn.Sequential`` whose top-level children are
the layers mCAP partitions (ARCHITECTURE.md).

    from mcap.models import build_model
    built = build_model("vgg11:image_size=32")
    inputs, targets = built.example_batch(8)
    built.loss(built.module(inputs), targets).backward()

Importing this package does not import torch: spec parsing and trust (``spec``) are pure,
so a bad or untrusted spec is refused before anything heavy loads; ``build_model`` and
friends (``build``) load torch when first used. A user spec runs only as a ``TrustedSpec``
(typed on the command line or confirmed in the dashboard): data is data.
"""
from mcap.models.spec import (KNOWN_MODELS, ModelKind, ModelParam, TrustedSpec, UntrustedCode,
                              check_trusted, is_user_spec, normalise_spec, parse_spec, trusted)
from mcap.models.limits import TooLarge

_LAZY = ("BuiltModel", "build_model", "model_info", "count_parameters")

__all__ = ["BuiltModel", "build_model", "parse_spec", "normalise_spec", "KNOWN_MODELS",
           "ModelKind", "ModelParam", "model_info", "count_parameters", "TrustedSpec",
           "UntrustedCode", "check_trusted", "is_user_spec", "trusted", "TooLarge"]


def __getattr__(name: str):
    if name in _LAZY:
        from mcap.models import build
        return getattr(build, name)
    raise AttributeError(f"module 'mcap.models' has no attribute {name!r}")
