"""Building models (torch): the built-in ones and user models; see ``mcap.models``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch
from torch import nn
from torch.nn import functional as F

from mcap.core.errors import McapError
from mcap.core.types import Layer, ModelInfo
from mcap.models.limits import check_allocation, check_parameter_bytes
from mcap.models.hfspec import is_hf_spec
from mcap.models.spec import check_trusted, is_user_spec, normalise_spec, parse_spec


@dataclass(frozen=True)
class BuiltModel:
    module: nn.Sequential
    example_batch: Callable[..., tuple]  # (batch_size, seed=0) -> (inputs, targets)
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    info: ModelInfo


def _generator(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _image_batch(image_size: int, classes: int) -> Callable[..., tuple]:
    """Random images and labels, like the paper's randomly generated 224x224 data (4.1)."""
    def example_batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        check_allocation(f"a batch of {batch_size} images of {image_size}x{image_size}",
                         4 * 3 * batch_size * image_size * image_size)
        g = _generator(seed)
        x = torch.randn(batch_size, 3, image_size, image_size, generator=g)
        return x, torch.randint(0, classes, (batch_size,), generator=g)
    return example_batch


def _token_batch(vocab: int, seq: int) -> Callable[..., tuple]:
    def example_batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        check_allocation(f"a batch of {batch_size} sequences of {seq} tokens", 2 * 8 * batch_size * seq)
        g = _generator(seed)
        ids = torch.randint(0, vocab, (batch_size, seq), generator=g)
        return ids, torch.randint(0, vocab, (batch_size, seq), generator=g)
    return example_batch


def _build(name: str, params: dict) -> tuple[nn.Sequential, Callable, Callable]:
    if name == "vgg11":
        from mcap.models.vgg import vgg11
        return (vgg11(**params), _image_batch(params["image_size"], params["classes"]),
                F.cross_entropy)
    if name == "amoebanet-d":
        from mcap.models.amoebanet import amoebanet_d
        return (amoebanet_d(**params), _image_batch(params["image_size"], params["classes"]),
                F.cross_entropy)
    if name == "gpt":
        from mcap.models.gpt import gpt, lm_loss
        return gpt(**params), _token_batch(params["vocab"], params["seq"]), lm_loss
    if is_hf_spec(name):  # built in: transformers' own classes, no user code (issue 29)
        from mcap.models.hf import build_hf
        return build_hf(name, params)
    from mcap.models.user import load_user_model
    return load_user_model(name, params)


def model_info(spec: str, module: nn.Sequential) -> ModelInfo:
    """One ``Layer`` per top-level child: its parameter bytes (a weight two layers share,
    a tied embedding and head, counts in each: each stage holding either pays it) and its
    kind (``mcap_kind`` where a wrapper names what it wraps, else its class)."""
    layers = tuple(
        Layer(name, sum(p.numel() * p.element_size() for p in child.parameters()),
              getattr(child, "mcap_kind", "") or type(child).__name__)
        for name, child in module.named_children())
    return ModelInfo(spec=spec, layers=layers)


def build_model(spec: str, device: Optional[str] = None, seed: int = 0, *,
                allow_user_code: bool = False) -> BuiltModel:
    """Build the model a spec names. ``device="meta"`` builds shapes only (no memory),
    for counting parameters of models too large to allocate. Weights are seeded so every
    stage process builds identical layers; the caller's RNG state is left untouched.

    A user spec (``package.module:function``) is imported and called only when it is a
    ``TrustedSpec`` (typed on the command line or confirmed in the dashboard) or the caller
    passes ``allow_user_code=True``; one read from a file raises ``UntrustedCode`` before
    anything is imported (issue 12, data is data). On a real device the parameters are
    first counted on the meta device and a model that cannot fit in host memory is refused
    (``TooLarge``) before anything is allocated."""
    if not allow_user_code:
        check_trusted(spec)
    name, params = parse_spec(spec)
    if device != "meta":
        try:
            meta = _construct(spec, name, params, "meta", seed)[0]
        except McapError:
            if not is_user_spec(str(spec).strip()):
                raise
            meta = None  # a user model that cannot be built on meta is counted as it is built
        if meta is not None:
            check_parameter_bytes(str(spec), sum(p.numel() * p.element_size() for p in meta.parameters()))
        del meta
    module, example_batch, loss = _construct(spec, name, params, device, seed)
    return BuiltModel(module, example_batch, loss, model_info(normalise_spec(spec), module))


class _NoFillOnMeta(torch.overrides.TorchFunctionMode):
    """Drawing random values into a meta tensor (``nn.init.normal_``, an embedding's
    initialisation) is a no-op: a meta tensor has no values. torch's own meta version of
    ``normal_`` imports torch._dynamo (about a torch import of CPU) in the process that
    counts the model (each ``python -m mcap`` command on a GPT), for nothing. A mode is
    thread-local: a build on a real device in another thread is not touched."""

    FILLS = (torch.nn.init.normal_, torch.Tensor.normal_)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.FILLS:
            tensor = args[0] if args else kwargs.get("tensor", kwargs.get("self"))
            if isinstance(tensor, torch.Tensor) and tensor.is_meta:
                return tensor
        return func(*args, **kwargs)


def _construct(spec: str, name: str, params: dict, device: Optional[str], seed: int):
    user = is_user_spec(str(spec).strip())
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if device == "meta":
                with torch.device(device), _NoFillOnMeta():
                    return _build(name, params)
            if device is not None:
                with torch.device(device):
                    return _build(name, params)
            return _build(name, params)
    except McapError:
        raise
    except Exception as exc:  # sizes torch cannot represent, a user model that raises
        who = "user model" if user else "model"
        raise McapError(f"{who} {str(spec)!r} cannot be built: {type(exc).__name__}: "
                         f"{_first_line(exc)}") from None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else ""


def count_parameters(spec: str, *, allow_user_code: bool = False) -> int:
    """Trainable parameters of a spec, counted on the meta device (allocates nothing)."""
    module = build_model(spec, device="meta", allow_user_code=allow_user_code).module
    return sum(p.numel() for p in module.parameters() if p.requires_grad)
