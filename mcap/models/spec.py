"""Model specs on the command line: ``vgg11:image_size=32``, ``gpt:layers=8,hidden=256``,
or a user model ``package.module:function``.

Pure string handling (no torch) so the CLI can reject a bad spec before importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcap.core.errors import UnknownModel


@dataclass(frozen=True)
class ModelParam:
    name: str
    default: int
    help: str


@dataclass(frozen=True)
class ModelKind:
    """A built-in model: its name, its integer parameters with defaults, a one-line summary."""
    name: str
    params: tuple[ModelParam, ...]
    summary: str

    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)


KNOWN_MODELS: dict[str, ModelKind] = {
    k.name: k
    for k in (
        ModelKind(
            "vgg11",
            (
                ModelParam("image_size", 32, "square input images, a multiple of 32"),
                ModelParam("classes", 10, "output classes"),
                ModelParam("hidden", 4096, "width of the two hidden classifier layers"),
            ),
            "VGG11 flattened to 30 layers (paper 4.2); 224/1000 gives 132.9M parameters",
        ),
        ModelKind(
            "amoebanet-d",
            (
                ModelParam("layers", 6, "normal cells L, a multiple of 3"),
                ModelParam("filters", 64, "filters F, a multiple of 4"),
                ModelParam("image_size", 32, "square input images, a multiple of 32"),
                ModelParam("classes", 10, "output classes"),
            ),
            "AmoebaNet-D(L, F) (paper 4.3), torchgpipe's benchmark design; L+6 layers",
        ),
        ModelKind(
            "gpt",
            (
                ModelParam("layers", 4, "decoder blocks"),
                ModelParam("hidden", 128, "model width"),
                ModelParam("heads", 4, "attention heads; must divide hidden"),
                ModelParam("vocab", 1024, "vocabulary size"),
                ModelParam("seq", 64, "sequence length"),
            ),
            "GPT-style decoder: embedding, N blocks, head; N+2 layers",
        ),
    )
}


def _known() -> str:
    parts = [f"{k.name}:{','.join(f'{p.name}={p.default}' for p in k.params)}"
             for k in KNOWN_MODELS.values()]
    return "; ".join(parts) + "; or a user model package.module:function"


def _parse_value(raw: str, key: str, spec: str) -> int | float | str:
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


def is_user_spec(spec: str) -> bool:
    """``package.module:function`` — the part before the first colon is not a built-in
    name and the part after it is a Python identifier, not ``key=value`` pairs."""
    name, _, rest = spec.partition(":")
    if name in KNOWN_MODELS or not rest:
        return False
    func = rest.split(":", 1)[0]
    return func.isidentifier() and all(p.isidentifier() for p in name.split("."))


def parse_spec(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """Split a spec into (name, params) with every default filled in.

    Built-in: ``name[:key=value,...]`` -> ("vgg11", {"image_size": 32, ...}).
    User: ``package.module:function[:key=value,...]`` -> ("package.module:function", {...});
    a user model's params are passed to its function as keyword arguments.
    """
    spec = spec.strip()
    if is_user_spec(spec):
        module, func, *rest = spec.split(":", 2)
        return f"{module}:{func}", _parse_pairs(rest[0] if rest else "", spec, None)
    name, _, rest = spec.partition(":")
    kind = KNOWN_MODELS.get(name)
    if kind is None:
        raise UnknownModel(f"unknown model {name!r} in spec {spec!r}; known: {_known()}")
    params: dict[str, int | float | str] = {p.name: p.default for p in kind.params}
    params.update(_parse_pairs(rest, spec, kind))
    return name, params


def _parse_pairs(text: str, spec: str, kind: ModelKind | None) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UnknownModel(f"spec {spec!r}: expected key=value, got {pair!r}")
        if kind is not None and key not in kind.param_names():
            raise UnknownModel(
                f"model {kind.name!r} has no parameter {key!r} (spec {spec!r}); "
                f"known: {', '.join(f'{p.name}={p.default}' for p in kind.params)}")
        value = _parse_value(raw.strip(), key, spec)
        if kind is not None and not isinstance(value, int):
            raise UnknownModel(f"spec {spec!r}: {key} must be an integer, got {raw!r}")
        out[key] = value
    return out


def normalise_spec(spec: str) -> str:
    """The spec with every parameter spelled out in declared order: equal models, equal strings."""
    name, params = parse_spec(spec)
    if not params:
        return name
    body = ",".join(f"{k}={v}" for k, v in params.items())
    return f"{name}:{body}"
