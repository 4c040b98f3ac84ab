"""Model specs on the command line: ``vgg11:image_size=32``, ``gpt:layers=8,hidden=256``,
a Hugging Face architecture ``hf:gpt2:n_layer=6,seq=256`` (``mcap.models.hfspec``), or a user
model ``package.module:function``.

Pure string handling (no torch) so the CLI can reject a bad spec before importing torch.
"""
from __future__ import annotations

from dataclasses import dataclass

from mcap.core import numbers
from mcap.core.errors import UnknownModel
from mcap.models import hfspec


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


# Layers a built-in model may have (issue 28): checked on the spec, before the model is
# built even on the meta device (gpt:layers=100000000 took 1.3 GB in 60 s of building
# there). 1,024 layers build in seconds; profiling plans are limited to 512
# (mcap.core.profiling.schedule.MAX_PLAN_LAYERS).
MAX_LAYERS = 1024
# How many layers a built-in model has, from its parameters (vgg.py, amoebanet.py, gpt.py).
_LAYER_COUNTS = {"vgg11": lambda p: 30, "amoebanet-d": lambda p: p["layers"] + 6,
                 "gpt": lambda p: p["layers"] + 2}
# A spec echoed in a message is cut to this many characters, its length named; a longer
# spec than MAX_SPEC_CHARS is refused (a built-in spec is under 100, a user one a module
# path and a function name).
SHOWN_SPEC_CHARS = 200
MAX_SPEC_CHARS = 1024


def shown(spec: str) -> str:
    """``spec`` for a message: repr'd, cut to SHOWN_SPEC_CHARS with its length named (a
    97 KB spec was echoed whole, twice, in one line)."""
    text = repr(str(spec))
    if len(text) <= SHOWN_SPEC_CHARS:
        return text
    return f"{text[:SHOWN_SPEC_CHARS - 20]}...' ({len(str(spec)):,} characters)"


def layer_count(name: str, params: dict) -> int | None:
    """The number of layers of a built-in model with these parameters; None for a user
    model (only building it tells)."""
    count = _LAYER_COUNTS.get(name)
    return None if count is None else count(params)


def _known() -> str:
    parts = [f"{k.name}:{','.join(f'{p.name}={p.default}' for p in k.params)}"
             for k in KNOWN_MODELS.values()]
    return ("; ".join(parts) + "; " + hfspec.known()
            + "; or a user model package.module:function")


def _parse_value(raw: str, key: str, spec: str) -> int | float | str:
    """An int or a float in ASCII digits (``mcap.core.numbers``: "٣" is not 3), else the text."""
    value = numbers.whole(raw, max_digits=4000)  # int() refuses 4,300 digits and more
    if value is None:
        value = numbers.real(raw)
    return raw if value is None else value


def is_user_spec(spec: str) -> bool:
    """``package.module:function`` — the part before the first colon is not a built-in
    name and the part after it is a Python identifier, not ``key=value`` pairs."""
    name, _, rest = spec.partition(":")
    if name in KNOWN_MODELS or name == hfspec.PREFIX or not rest:
        return False  # ``hf`` is reserved for Hugging Face architectures (built in)
    func = rest.split(":", 1)[0]
    return func.isidentifier() and all(p.isidentifier() for p in name.split("."))


def parse_spec(spec: str) -> tuple[str, dict[str, int | float | str]]:
    """Split a spec into (name, params) with every default filled in.

    Built-in: ``name[:key=value,...]`` -> ("vgg11", {"image_size": 32, ...}).
    User: ``package.module:function[:key=value,...]`` -> ("package.module:function", {...});
    a user model's params are passed to its function as keyword arguments.
    """
    spec = spec.strip()
    if len(spec) > MAX_SPEC_CHARS:
        raise UnknownModel(f"spec {shown(spec)} is longer than the limit of {MAX_SPEC_CHARS:,} "
                           f"characters")
    if hfspec.is_hf_spec(spec):
        return hfspec.parse(spec)
    if is_user_spec(spec):
        module, func, *rest = spec.split(":", 2)
        return f"{module}:{func}", _parse_pairs(rest[0] if rest else "", spec, None)
    name, _, rest = spec.partition(":")
    kind = KNOWN_MODELS.get(name)
    if kind is None:
        raise UnknownModel(f"unknown model {shown(name)} in spec {shown(spec)}; known: "
                           f"{_known()}")
    params: dict[str, int | float | str] = {p.name: p.default for p in kind.params}
    params.update(_parse_pairs(rest, spec, kind))
    layers = layer_count(name, params)
    if layers is not None and not 1 <= layers <= MAX_LAYERS:
        raise UnknownModel(f"spec {shown(spec)} has {layers:,} layers; models are limited to "
                           f"1..{MAX_LAYERS:,} layers (checked before anything is built)")
    return name, params


def _parse_pairs(text: str, spec: str, kind: ModelKind | None) -> dict[str, int | float | str]:
    out: dict[str, int | float | str] = {}
    for pair in filter(None, (p.strip() for p in text.split(","))):
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UnknownModel(f"spec {shown(spec)}: expected key=value, got {shown(pair)}")
        if kind is not None and key not in kind.param_names():
            raise UnknownModel(
                f"model {kind.name!r} has no parameter {shown(key)} (spec {shown(spec)}); "
                f"known: {', '.join(f'{p.name}={p.default}' for p in kind.params)}")
        if key in out:  # vgg11:image_size=32,image_size=64 was taken as 64, silently
            raise UnknownModel(f"spec {shown(spec)} gives {key} twice ({key}={out[key]} and "
                               f"{key}={raw.strip()[:40]}); give each parameter once")
        value = _parse_value(raw.strip(), key, spec)
        if kind is not None and not isinstance(value, int):
            raise UnknownModel(f"spec {shown(spec)}: {key} must be an integer, got "
                               f"{shown(raw)}")
        out[key] = value
    return out


def normalise_spec(spec: str) -> str:
    """The spec with every parameter spelled out in declared order: equal models, equal strings.
    A trusted spec stays trusted (``TrustedSpec``): the same model, spelled out."""
    if hfspec.is_hf_spec(spec):
        return hfspec.normalise(spec)
    name, params = parse_spec(spec)
    body = ",".join(f"{k}={v}" for k, v in params.items())
    text = f"{name}:{body}" if params else name
    return keep_trust(spec, text)


# --- trust: data is data (issue 12) -------------------------------------------------------
#
# A user spec names a module to import and a function to call: running it runs that code.
# mcap runs it only when a person asked for it (the ``--model`` argument typed on the
# command line, or a dashboard confirmation naming the module and function), never because
# a file (profile, sweep, upload, dataset folder, store) says so. The spec a person typed is
# carried as a ``TrustedSpec``; a plain ``str`` (what every loader returns) is untrusted.
# ``mcap.models.build_model`` refuses an untrusted user spec before importing anything, in
# every process (the stage workers receive the spec pickled, type and all).


class TrustedSpec(str):
    """A model spec a person typed or confirmed; only for user specs does it matter.

    Created by the CLI's ``--model`` parser (``trusted_model_arg``) and by the dashboard
    after an explicit confirmation; string operations return plain (untrusted) ``str``, so
    trust never spreads to text built from it by accident (``keep_trust`` does it on purpose)."""

    __slots__ = ()


class UntrustedCode(UnknownModel):
    """A user spec that came from data (a file, an upload, the store), not from a person."""


def trusted(spec: str) -> TrustedSpec:
    """Mark a spec as typed or confirmed by a person (CLI argument, dashboard confirmation)."""
    return TrustedSpec(spec)


def is_trusted(spec: str) -> bool:
    return isinstance(spec, TrustedSpec) or not is_user_spec(str(spec).strip())


def keep_trust(source: str, derived: str) -> str:
    """``derived`` (a spec built from ``source``: normalised, one parameter changed) is as
    trusted as ``source`` was, and only if it names the same module and function."""
    if isinstance(source, TrustedSpec) and user_target(source) == user_target(derived):
        return TrustedSpec(derived)
    return derived


def user_target(spec: str) -> str | None:
    """``package.module:function`` of a user spec, None for a built-in one."""
    spec = str(spec).strip()
    if not is_user_spec(spec):
        return None
    module, func = spec.split(":", 2)[:2]
    return f"{module}:{func}"


def untrusted_note(spec: str, how: str = "") -> str:
    """What to say when a file names a user spec: mcap does not run it, and how to allow it."""
    target = user_target(spec) or str(spec)
    hint = how or f"python -m mcap recommend --method time --model {str(spec).strip()} ..."
    return (f"the model spec names user code {target} (it came from a file, an upload or the "
            f"store); mcap does not run code a file names. To run it, type the spec yourself: {hint}")


def check_trusted(spec: str, how: str = "") -> None:
    """Raise ``UntrustedCode`` (an McapError, before any import) for a user spec that is
    not a ``TrustedSpec``; ``how`` tells the reader how to allow it."""
    if not is_trusted(spec):
        raise UntrustedCode(untrusted_note(spec, how))


def trusted_model_arg(text: str) -> TrustedSpec:
    """argparse type of ``--model``: a spec typed on the command line is trusted. A bad spec
    is an argparse error (exit 2) naming it, before anything is opened."""
    import argparse
    try:
        parse_spec(text)
    except UnknownModel as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return TrustedSpec(text.strip())


# --- what tensor parallelism splits (issue 38, item 5) ------------------------------------

# Configuration keys of a Hugging Face family that tensor parallelism splits (heads, the
# model width, the MLP's inner width), by the names the families use.
_HF_TP_KEYS = {"heads": ("num_attention_heads", "n_head", "num_heads"),
               "hidden": ("hidden_size", "n_embd", "d_model"),
               "ffn": ("intermediate_size", "n_inner", "d_ff")}


def tensor_parallel_sizes(spec: str) -> tuple[tuple[str, int], ...] | None:
    """The sizes a tp stage of this model splits, by name (a degree must divide each):
    GPT's heads, width and MLP width (4 x width), VGG11's classifier width, a Hugging Face
    architecture's heads, hidden and intermediate sizes where its spec or named
    configuration gives them. None where mcap cannot say (AmoebaNet, whose only Linear is
    its classifier; a user model; a spec that does not parse)."""
    try:
        name, params = parse_spec(spec)
    except UnknownModel:
        return None
    if name == "gpt":
        return (("heads", params["heads"]), ("hidden", params["hidden"]),
                ("ffn", 4 * params["hidden"]))
    if name == "vgg11":
        return (("hidden", params["hidden"]),)
    if hfspec.is_hf_spec(name):
        named = hfspec.named_configs().get(name.partition(":")[2])
        values = {**(named.config if named else {}), **params}
        found = tuple((what, values[k]) for what, keys in _HF_TP_KEYS.items()
                      for k in keys if isinstance(values.get(k), int)
                      and not isinstance(values.get(k), bool))
        seen, out = set(), []
        for what, size in found:  # the first key of each kind that the spec gives
            if what not in seen:
                seen.add(what)
                out.append((what, size))
        return tuple(out) or None
    return None
# The parameter counting a built-in model's repeated blocks (``with_blocks``): GPT's decoder
# blocks. VGG11 has none; AmoebaNet-D's cells change shape at its reduction cells.
_BLOCKS_KEY = {"gpt": "layers"}


def with_blocks(spec: str, blocks: int) -> str:
    """The spec of the same model with ``blocks`` repeated blocks (issue 41: predict a deep
    model from a shallow profile), normalised; UnknownModel naming the models that have a
    block count for any other. Pure: the deep model is never built."""
    text = str(spec).strip()
    if isinstance(blocks, bool) or not isinstance(blocks, int) or blocks < 1:
        raise UnknownModel(f"a block count must be an integer >= 1, got {blocks!r}")
    if hfspec.is_hf_spec(text):
        return hfspec.with_blocks(text, blocks)
    name, params = parse_spec(text) if not is_user_spec(text) else (text, {})
    key = _BLOCKS_KEY.get(name)
    if key is None:
        raise UnknownModel(f"model {shown(text)} has no block count to change; --blocks applies "
                           f"to {', '.join(_BLOCKS_KEY)} and to the Hugging Face families with one "
                           f"stack of blocks (hf:gpt2, hf:llama, hf:qwen2, hf:mistral, hf:bert, hf:vit)")
    params = dict(params)
    params[key] = blocks
    return normalise_spec(f"{name}:" + ",".join(f"{k}={v}" for k, v in params.items()))
