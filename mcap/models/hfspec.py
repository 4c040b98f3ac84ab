"""Hugging Face architectures by name (issue 29), the pure half: ``hf:`` specs as text.

    hf:gpt2                          transformers' GPT2Config defaults, seq=128
    hf:gpt2:n_layer=24,n_embd=1024,seq=512
    hf:llama-3.2-1b:num_hidden_layers=4     a named configuration (hfconfigs/*.json)
    hf:resnet:depths=2/2/2/2,image_size=64  a list is written with "/"

The part after ``hf:`` is a transformers ``model_type`` (built from its own configuration
class, ``AutoConfig.for_model``) or a named configuration shipped in ``hfconfigs/`` with its
public source. Every other ``key=value`` overrides a configuration key, except the input
sizes (``seq`` for text, ``image_size`` for images). Weights are random: memory does not
depend on their values, and no model hub is reached (``mcap.models.hf`` builds them).

This module never imports torch or transformers, so ``--model hf:...`` is checked for its
form (family, names, value syntax) before anything heavy loads; the keys themselves are
checked against the configuration class when the model is built (``mcap.models.hf``), before
anything is allocated. ``hf:`` names are built in (transformers is a pinned dependency):
they run no user code and need no confirmation, and a file naming one is as safe as one
naming ``vgg11``.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mcap.core import numbers
from mcap.core.errors import UnknownModel

PREFIX = "hf"
CONFIG_DIR = Path(__file__).resolve().parent / "hfconfigs"


@dataclass(frozen=True)
class Family:
    """A transformers ``model_type`` mcap can lay out as a sequence of layers."""
    model_type: str
    inputs: str          # "text" (token ids, input key seq) or "image" (input key image_size)
    task: str            # what the head trains: causal-lm, masked-lm, seq2seq-lm, image-classification
    default_input: int   # seq or image_size when the spec does not say
    summary: str
    blocks_key: str = ""  # the configuration key counting its repeated blocks ("": not one stack)

    @property
    def input_key(self) -> str:
        return "seq" if self.inputs == "text" else "image_size"


FAMILIES: dict[str, Family] = {f.model_type: f for f in (
    Family("gpt2", "text", "causal-lm", 128,
           "GPT-2 (GPT2LMHeadModel): embeddings, n_layer blocks, ln_f, lm_head tied to wte", "n_layer"),
    Family("bert", "text", "masked-lm", 128,
           "BERT (BertForMaskedLM): embeddings, num_hidden_layers blocks, MLM head tied to the word embeddings",
           "num_hidden_layers"),
    Family("llama", "text", "causal-lm", 128,
           "Llama (LlamaForCausalLM): embed_tokens, num_hidden_layers blocks, RMSNorm, lm_head",
           "num_hidden_layers"),
    Family("mistral", "text", "causal-lm", 128,
           "Mistral (MistralForCausalLM), laid out like Llama", "num_hidden_layers"),
    Family("qwen2", "text", "causal-lm", 128,
           "Qwen2 (Qwen2ForCausalLM), laid out like Llama", "num_hidden_layers"),
    Family("t5", "text", "seq2seq-lm", 128,
           "T5 (T5ForConditionalGeneration): shared embedding, encoder blocks, encoder norm, "
           "decoder embedding, decoder blocks, decoder norm, lm_head (seq tokens in and out)"),
    Family("vit", "image", "image-classification", 224,
           "ViT (ViTForImageClassification): patch embeddings, num_hidden_layers blocks, layernorm, classifier",
           "num_hidden_layers"),
    Family("resnet", "image", "image-classification", 224,
           "ResNet (ResNetForImageClassification): stem, every residual block of every stage, pooler, classifier"),
)}

_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
MAX_VALUE_CHARS = 200


def is_hf_spec(spec: str) -> bool:
    return str(spec).strip().startswith(PREFIX + ":")


@dataclass(frozen=True)
class Named:
    """A named configuration: a model_type, its public configuration values, where from."""
    name: str
    model_type: str
    config: dict
    inputs: dict
    source: str


def named_configs(config_dir: Path | None = None) -> dict[str, Named]:
    """The shipped named configurations (``hfconfigs/NAME.json``), by name."""
    out = {}
    for path in sorted((config_dir or CONFIG_DIR).glob("*.json")):
        d = json.loads(path.read_text())
        out[path.stem] = Named(path.stem, d["model_type"], dict(d.get("config", {})),
                               dict(d.get("inputs", {})), d.get("source", ""))
    return out


def known() -> str:
    return (f"hf:<model_type> with model_type one of {', '.join(FAMILIES)}; or a named "
            f"configuration: {', '.join('hf:' + n for n in named_configs())}")


def parse_value(raw: str, key: str, spec: str):
    """The value's syntax only: int, float, true/false, a "/"-separated list of numbers, or a
    bare word (an activation name). Whether the key takes it is checked against the
    configuration class (``mcap.models.hf``)."""
    raw = raw.strip()
    if not raw or len(raw) > MAX_VALUE_CHARS:
        raise UnknownModel(f"spec {spec!r}: {key} needs a value of 1 to {MAX_VALUE_CHARS} characters, got {raw!r}")
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    if raw.lower() in ("none", "null"):
        return None
    if "/" in raw:
        return [parse_value(part, key, spec) for part in raw.split("/")]
    for conv in (lambda t: numbers.whole(t, max_digits=4000), numbers.real):  # ASCII only
        value = conv(raw)
        if value is None:
            continue
        if value != value or value in (float("inf"), float("-inf")):
            raise UnknownModel(f"spec {spec!r}: {key}={raw} is not a finite number")
        return value
    if not re.fullmatch(r"[A-Za-z0-9_.\-]+", raw):
        raise UnknownModel(f"spec {spec!r}: {key}={raw!r} is not a number, true/false, a list "
                           f"like 2/2/2/2 or a plain word")
    return raw


def format_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, list):
        return "/".join(format_value(v) for v in value)
    return str(value)


def parse(spec: str) -> tuple[str, dict]:
    """``hf:NAME[:k=v,...]`` -> (``hf:NAME``, {overrides..., input key: size}) with the input
    size filled in (the family's default, or the named configuration's). Raises
    ``UnknownModel`` naming the spec for an unknown name or a malformed pair."""
    text = str(spec).strip()
    _, _, rest = text.partition(":")
    name, _, body = rest.partition(":")
    name = name.strip()
    family = family_of(name, text)
    params: dict = {}
    for pair in filter(None, (p.strip() for p in body.split(","))):
        key, eq, raw = pair.partition("=")
        key = key.strip()
        if not eq or not _KEY.match(key):
            raise UnknownModel(f"spec {text!r}: expected key=value with a configuration key, got {pair!r}")
        if key in params:
            raise UnknownModel(f"spec {text!r}: {key} is given twice")
        params[key] = parse_value(raw, key, text)
    if family.inputs == "image" and "seq" in params:
        raise UnknownModel(f"spec {text!r}: {family.model_type} takes images; give image_size=, not seq=")
    named = named_configs().get(name)
    size = params.pop(family.input_key, None)
    if size is None:
        size = (named.inputs.get(family.input_key) if named else None) or family.default_input
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1_000_000:
        raise UnknownModel(f"spec {text!r}: {family.input_key} must be an integer from 1 to "
                           f"1,000,000, got {size!r}")
    params = dict(sorted(params.items()))
    params[family.input_key] = size
    return f"{PREFIX}:{name}", params


def family_of(name: str, spec: str = "") -> Family:
    """The family a name (a model_type or a named configuration) belongs to."""
    if name in FAMILIES:
        return FAMILIES[name]
    if _NAME.match(name or ""):
        named = named_configs().get(name)
        if named is not None:
            if named.model_type not in FAMILIES:  # a shipped file we cannot lay out: our bug
                raise UnknownModel(f"named configuration {name!r} is of model_type "
                                   f"{named.model_type!r}, which mcap cannot lay out")
            return FAMILIES[named.model_type]
    raise UnknownModel(f"unknown Hugging Face model {name!r} in spec {spec or name!r}; {known()}. "
                       f"A Hub id cannot be resolved here (no download): write its configuration "
                       f"keys, e.g. hf:llama:hidden_size=2048,num_hidden_layers=16")


def normalise(spec: str) -> str:
    """Equal models, equal strings: keys sorted, the input size spelled out last."""
    name, params = parse(spec)
    return f"{name}:" + ",".join(f"{k}={format_value(v)}" for k, v in params.items())


def with_blocks(spec: str, blocks: int) -> str:
    """``spec`` with ``blocks`` repeated blocks (its family's ``blocks_key``), normalised;
    UnknownModel naming the family for one that is not a single stack of blocks (T5's
    encoder and decoder, ResNet's stages)."""
    name, params = parse(spec)
    family = family_of(name.split(":", 1)[1], spec)
    if not family.blocks_key:
        raise UnknownModel(f"{name} ({family.model_type}) is not one stack of identical blocks; "
                           f"--blocks applies to {', '.join(f for f, v in FAMILIES.items() if v.blocks_key)}")
    body = dict(params)
    size = body.pop(family.input_key)
    body[family.blocks_key] = blocks
    pairs = ",".join(f"{k}={format_value(v)}" for k, v in body.items())
    return normalise(f"{name}:{pairs},{family.input_key}={size}")
