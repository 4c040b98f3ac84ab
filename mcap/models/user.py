"""User models given as ``package.module:function``.

Contract (docs/models.md, "User models"): ``function(**params)`` returns ``(module, example_batch, loss)``
or ``(module, example_batch, loss, split)``: ``module`` an ``nn.Sequential`` whose top-level
children are the layers, or any ``nn.Module``, which the pipeline tracer splits into layers
(``mcap.models.traced``: at its top-level children, a ModuleList/ModuleDict as its items, or
at the submodules named in ``split``, e.g. ``["embed", "blocks.a", "blocks.b", "head"]``);
``example_batch(batch_size, seed=0) -> (inputs, targets)``, ``loss(output, targets) -> Tensor``.
Loading a user model imports that module and calls that function: it runs that code.
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable

from torch import nn

from mcap.core.errors import McapError, UnknownModel


def load_user_model(target: str, params: dict) -> tuple[nn.Sequential, Callable, Callable]:
    module_name, _, func_name = target.partition(":")
    top = module_name.split(".", 1)[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        # No model lives there, and calling its functions (os:system) is never what a
        # --model asks for: refused before anything is imported or called.
        raise UnknownModel(f"user model {target!r}: {module_name!r} is part of Python's "
                           "standard library, not a module of yours; name the module that "
                           "defines your model function (package.module:function)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UnknownModel(f"user model {target!r}: cannot import {module_name!r} ({exc}); it is "
                           f"looked for on sys.path, which includes the folder you run mcap from") from None
    except Exception as exc:  # the module itself raised while being imported
        raise UnknownModel(f"user model {target!r}: importing {module_name!r} raised "
                           f"{type(exc).__name__}: {exc}") from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise UnknownModel(f"user model {target!r}: {module_name!r} has no callable {func_name!r}")
    try:
        result = func(**params)
    except TypeError as exc:
        raise UnknownModel(f"user model {target!r} does not accept the parameters "
                           f"{', '.join(f'{k}={v}' for k, v in params.items()) or '(none)'}: {exc}") from None
    except McapError:
        raise
    except Exception as exc:
        raise McapError(f"user model {target!r} raised {type(exc).__name__} while building: {exc}") from None
    if not (isinstance(result, tuple) and len(result) in (3, 4)):
        raise McapError(f"user model {target!r} must return (module, example_batch, loss) or "
                        f"(module, example_batch, loss, split), got {type(result).__name__}")
    seq, example_batch, loss = result[:3]
    names = result[3] if len(result) == 4 else None
    if not isinstance(seq, nn.Module):
        raise McapError(f"user model {target!r}: first item must be an nn.Module, "
                        f"got {type(seq).__name__}")
    if not callable(example_batch) or not callable(loss):
        raise McapError(f"user model {target!r}: example_batch and loss must be callable")
    if names is not None and not (isinstance(names, (list, tuple)) and all(isinstance(n, str) for n in names)):
        raise McapError(f"user model {target!r}: split must be a list of submodule names, got {names!r}")
    if not isinstance(seq, nn.Sequential) or names is not None:
        from mcap.models import traced
        seq = traced.split(seq, traced.first_input(example_batch), names, what=f"user model {target!r}")
    if len(seq) == 0:
        raise McapError(f"user model {target!r}: the nn.Sequential has no layers")
    return seq, example_batch, loss
