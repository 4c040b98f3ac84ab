"""Hugging Face architectures by name, offline (issue 29): a transformers model laid out as
the ``nn.Sequential`` of layers mCAP partitions.

``hf:gpt2:n_layer=6,seq=256`` builds ``GPT2LMHeadModel`` from transformers' own
``GPT2Config`` (``AutoConfig.for_model``) with those keys overridden, random weights and no
download, and lays its modules out in their natural order, one mCAP layer each:

    embeddings | block 0 | block 1 | ... | final norm | head

(ResNet: stem, every residual block of every stage, pooler, classifier; T5: the encoder's
sequence, then the decoder's). The layers wrap transformers' own modules, so a stage runs
exactly their code: SDPA attention (``attn_implementation=sdpa``, the default; ``eager``
on request), dropout in training mode (its masks are saved for backward), ``use_cache``
off, norms in float32 (the models train in float32; Llama's RMSNorm upcasts to float32
itself, as it does under mixed precision).

**What crosses a stage boundary.** The hidden states, plus what the model computes once
and every block reads: Llama's rotary ``(cos, sin)``, an eager causal mask, T5's position
biases and encoder states. They are computed where the model computes them (the embedding
layer, T5's first block) and travel with the hidden states, as the pipeline tracer's split
of the same model sends them (``torch.distributed.pipelining``).

**Tied embedding and head** (GPT-2, BERT, T5, Llama-3.2 with ``tie_word_embeddings``): placed
as pipeline runtimes place them (Megatron-LM's embedding group, torchtitan): the first and
the last stage each hold the weight, with its own gradient and optimizer state (the runtime
sums the two gradients with an all-reduce each step, whose buffers are not modelled). A stage
holding both layers holds one copy (the parameter is shared). ``ModelInfo`` counts the tied
weight in the parameter bytes of both the embedding and the head layer, since each stage that
holds either pays it; the model's total parameters count it once (``count_parameters``).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F

from mcap.core.errors import McapError, UnknownModel
from mcap.models import hfspec
from mcap.models.hflayers import Apply, Layer, _pack, _unpack  # noqa: F401  (the layers' base)
from mcap.models.limits import check_allocation

ATTENTION = ("sdpa", "eager")
# Keys of the configuration a spec may not set: what the runtime decides (cache, outputs),
# what names the model rather than sizes it, and what would change the architecture mCAP lays out.
FIXED = {"architectures", "output_hidden_states", "return_dict", "output_attentions", "model_type",
         "transformers_version", "id2label", "label2id", "use_cache", "is_encoder_decoder",
         "problem_type", "stage_names", "out_features", "out_indices", "dtype", "torch_dtype",
         "is_decoder", "add_cross_attention", "tie_encoder_decoder", "chunk_size_feed_forward",
         "pruned_heads", "tokenizer_class", "prefix", "task_specific_params", "finetuning_task",
         "cross_attention_hidden_size", "decoder_start_token_id", "sep_token_id",
         "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
         "summary_first_dropout", "rope_parameters", "rope_scaling", "pretraining_tp",
         "layer_types", "pooler_output_size", "pooler_act", "encoder_stride", "use_return_dict"}
EXTRA = {"num_labels": 2, "attn_implementation": "sdpa"}
MAX_INT = 2**31 - 1
MAX_BLOCKS = 4096


def _transformers():
    try:
        import transformers
    except ImportError as exc:  # a broken install: say what to do
        raise McapError(f"hf: models need the transformers package (pinned in requirements.txt): {exc}") from None
    transformers.logging.set_verbosity_error()
    return transformers


# --- configuration: keys checked against transformers' own class ---------------------------

def configure(spec_name: str, params: dict):
    """The transformers configuration a spec names, every key checked (name, type, bounds)
    before any model is built. Returns (family, config, input size)."""
    tf = _transformers()
    name = spec_name.split(":", 1)[1]
    family = hfspec.family_of(name)
    named = hfspec.named_configs().get(name)
    params = dict(params)
    size = params.pop(family.input_key)
    values = dict(named.config) if named else {}
    values.update(params)
    default = tf.AutoConfig.for_model(family.model_type)
    allowed = {k: v for k, v in default.to_dict().items() if not k.startswith("_") and k not in FIXED}
    allowed.update({alias: allowed.get(target) for alias, target in default.attribute_map.items()
                    if target in allowed})
    allowed.update(EXTRA)
    if family.model_type == "resnet":  # no attention to implement
        allowed.pop("attn_implementation")
    if family.inputs == "image":
        allowed.pop("image_size", None)  # the input key, given as image_size=
    for key, value in values.items():
        if key not in allowed:
            near = sorted(allowed)
            raise UnknownModel(f"hf:{name}: {family.model_type} has no configuration key {key!r} "
                               f"a spec may set; it has {', '.join(near)} (and {family.input_key}=)")
        _check_value(name, key, value, allowed[key])
    attn = values.pop("attn_implementation", "sdpa")
    if attn not in ATTENTION:
        raise UnknownModel(f"hf:{name}: attn_implementation must be one of {', '.join(ATTENTION)}, got {attn!r}")
    if family.inputs == "image":
        values["image_size"] = size
    config = tf.AutoConfig.for_model(family.model_type, **values)
    config.use_cache = False  # training: no key/value cache (issue 29)
    if family.model_type != "resnet":
        config._attn_implementation = attn
    _check_sizes(name, family, config, size)
    return family, config, size


def _check_value(name: str, key: str, value, default) -> None:
    where = f"hf:{name}: {key}={hfspec.format_value(value)}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UnknownModel(f"{where} must be true or false")
        return
    if isinstance(default, list):
        if not (isinstance(value, list) and value and all(isinstance(v, int) and not isinstance(v, bool)
                                                          and 1 <= v <= MAX_INT for v in value)):
            raise UnknownModel(f"{where} must be a list of positive integers written like "
                               f"{hfspec.format_value(default) or '2/2'}")
        return
    if isinstance(default, str):
        if not isinstance(value, str):
            raise UnknownModel(f"{where} must be a word like {default!r}")
        return
    if isinstance(default, float) or ("drop" in key and default is None):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UnknownModel(f"{where} must be a number")
        if "drop" in key and not 0 <= value < 1:
            raise UnknownModel(f"{where}: a dropout probability must be in [0, 1)")
        if value < 0:
            raise UnknownModel(f"{where} must be >= 0")
        return
    if isinstance(default, int) or default is None:
        if value is None and default is None:
            return
        if isinstance(value, bool) or not isinstance(value, int):
            raise UnknownModel(f"{where} must be an integer")
        if not 0 <= value <= MAX_INT:
            raise UnknownModel(f"{where} must be from 0 to {MAX_INT:,}")
        return
    if not isinstance(value, type(default)):
        raise UnknownModel(f"{where}: expected a value like {hfspec.format_value(default)}")


def _check_sizes(name: str, family, config, size: int) -> None:
    """What the model cannot run, said before it is built."""
    def need(ok: bool, text: str) -> None:
        if not ok:
            raise UnknownModel(f"hf:{name}: {text}")

    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads"):
        if hasattr(config, key):
            need(getattr(config, key) >= 1, f"{key} must be >= 1, got {getattr(config, key)}")
    # blocks are Python objects even on the meta device: a count no model has is refused
    # before millions of modules are constructed to be counted
    for key in ("num_hidden_layers", "num_layers", "num_decoder_layers"):
        n = getattr(config, key, None)
        if isinstance(n, int):
            need(n <= MAX_BLOCKS, f"{key}={n}: at most {MAX_BLOCKS:,} blocks")
    if family.model_type == "resnet":
        need(sum(config.depths) <= MAX_BLOCKS, f"depths sum to {sum(config.depths)}: at most {MAX_BLOCKS:,} blocks")
    if family.model_type != "resnet":
        need(config.hidden_size % config.num_attention_heads == 0 or family.model_type in ("llama", "mistral", "qwen2", "t5"),
             f"num_attention_heads={config.num_attention_heads} must divide hidden_size={config.hidden_size}")
    if family.inputs == "text":
        need(config.vocab_size >= 2, f"vocab_size must be >= 2, got {config.vocab_size}")
        limit = getattr(config, "max_position_embeddings", None)
        if limit is not None and family.model_type != "t5":
            need(size <= limit, f"seq={size} is longer than the model's {limit} positions "
                                f"(raise max_position_embeddings / n_positions)")
    if family.model_type == "vit":
        need(1 <= config.patch_size <= size and size % config.patch_size == 0,
             f"image_size={size} must be a multiple of patch_size={config.patch_size}")
    if family.model_type == "resnet":
        need(len(config.depths) == len(config.hidden_sizes),
             f"depths ({hfspec.format_value(config.depths)}) and hidden_sizes "
             f"({hfspec.format_value(config.hidden_sizes)}) need one entry per stage each")
        need(size >= 32, f"image_size={size}: ResNet downsamples by 32; give image_size >= 32")
        need(config.layer_type in ("basic", "bottleneck"), f"layer_type must be basic or bottleneck, got {config.layer_type!r}")
    if family.inputs == "image":
        need(config.num_labels >= 1, f"num_labels must be >= 1, got {config.num_labels}")


# --- the layers mCAP sees -----------------------------------------------------------------

class TokenEmbeddings(Layer):
    """Token (and position) embeddings; computes what the blocks share: Llama's rotary
    (cos, sin), an eager causal mask."""

    def __init__(self, style: str, modules: dict, config, source: str, kind: str):
        super().__init__(kind, source)
        self.style = style
        for k, m in modules.items():
            setattr(self, k, m)
        self.config = config

    def forward(self, ids: torch.Tensor):
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        if self.style == "gpt2":
            hidden = self.drop(self.wte(ids) + self.wpe(pos))
        elif self.style == "bert":
            hidden = self.embeddings(input_ids=ids)
        else:  # llama-like
            hidden = self.embed_tokens(ids)
        extras: tuple = ()
        if self.style == "llama":
            extras += tuple(self.rotary_emb(hidden, position_ids=pos))
        if self.style != "bert" and self.config._attn_implementation == "eager":
            extras += (causal_mask(hidden),)
        return _pack(hidden, extras)


def causal_mask(hidden: torch.Tensor) -> torch.Tensor:
    """The additive causal mask transformers' ``create_causal_mask`` gives eager attention
    without padding ([batch, 1, seq, seq], 0 where allowed, the dtype's minimum elsewhere),
    made without reading values so it also runs on the meta device (stage shapes)."""
    b, s = hidden.shape[0], hidden.shape[1]
    full = torch.full((s, s), torch.finfo(hidden.dtype).min, dtype=hidden.dtype, device=hidden.device)
    return full.triu(1)[None, None].expand(b, 1, s, s).contiguous()


class Block(Layer):
    """One block of the model's ModuleList, called as the model calls it."""

    def __init__(self, block: nn.Module, style: str, source: str):
        super().__init__(type(block).__name__, source)
        self.block, self.style = block, style

    def forward(self, *inputs):
        hidden, *extras = _unpack(inputs)
        extras = tuple(extras)
        kw = {}
        rest = extras
        if self.style == "llama":
            kw["position_embeddings"] = (rest[0], rest[1])
            rest = rest[2:]
        if rest:
            kw["attention_mask"] = rest[0]
        out = self.block(hidden, **kw)
        if isinstance(out, tuple):
            out = out[0]
        return _pack(out, extras)


class ImageStem(Layer):
    def __init__(self, module: nn.Module, source: str, kind: str):
        super().__init__(kind, source)
        self.stem = module

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        return self.stem(pixels)


class ResidualBlock(Layer):
    def __init__(self, block: nn.Module, source: str):
        super().__init__(type(block).__name__, source)
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)


def _layout(family, model, config) -> list[tuple[str, nn.Module]]:
    t = family.model_type
    if t == "gpt2":
        tr = model.transformer
        out = [("embeddings", TokenEmbeddings("gpt2", {"wte": tr.wte, "wpe": tr.wpe, "drop": tr.drop},
                                              config, "transformer.wte+wpe+drop", "GPT2Embeddings"))]
        out += [(f"block{i}", Block(b, "gpt2", f"transformer.h.{i}")) for i, b in enumerate(tr.h)]
        out += [("ln_f", Apply(tr.ln_f, "transformer.ln_f")),
                ("lm_head", Apply(model.lm_head, "lm_head", "LMHead"))]
        return out
    if t == "bert":
        b = model.bert
        out = [("embeddings", TokenEmbeddings("bert", {"embeddings": b.embeddings}, config,
                                              "bert.embeddings", "BertEmbeddings"))]
        out += [(f"block{i}", Block(layer, "bert", f"bert.encoder.layer.{i}"))
                for i, layer in enumerate(b.encoder.layer)]
        out += [("mlm_head", Apply(model.cls, "cls", "BertOnlyMLMHead"))]
        return out
    if t in ("llama", "mistral", "qwen2"):
        m = model.model
        out = [("embeddings", TokenEmbeddings("llama", {"embed_tokens": m.embed_tokens, "rotary_emb": m.rotary_emb},
                                              config, "model.embed_tokens+rotary_emb", "TokenEmbeddings"))]
        out += [(f"block{i}", Block(layer, "llama", f"model.layers.{i}")) for i, layer in enumerate(m.layers)]
        out += [("norm", Apply(m.norm, "model.norm")), ("lm_head", Apply(model.lm_head, "lm_head", "LMHead"))]
        return out
    if t == "vit":
        v = model.vit
        out = [("embeddings", ImageStem(v.embeddings, "vit.embeddings", "ViTEmbeddings"))]
        out += [(f"block{i}", Block(layer, "vit", f"vit.layers.{i}"))
                for i, layer in enumerate(v.layers)]
        out += [("layernorm", Apply(v.layernorm, "vit.layernorm")),
                ("classifier", Apply(model.classifier, "classifier", "Classifier", first_token=True))]
        return out
    if t == "resnet":
        r = model.resnet
        out = [("embedder", ImageStem(r.embedder, "resnet.embedder", "ResNetEmbeddings"))]
        for s, stage in enumerate(r.encoder.stages):
            out += [(f"stage{s}_block{j}", ResidualBlock(layer, f"resnet.encoder.stages.{s}.layers.{j}"))
                    for j, layer in enumerate(stage.layers)]
        out += [("pooler", Apply(r.pooler, "resnet.pooler", "Pooler")),
                ("classifier", Apply(model.classifier, "classifier", "Classifier"))]
        return out
    if t == "t5":
        from mcap.models.hft5 import t5_layout
        return t5_layout(model, config)
    raise UnknownModel(f"hf: no layout for model_type {t!r}")


MODEL_CLASS = {"causal-lm": "AutoModelForCausalLM", "masked-lm": "AutoModelForMaskedLM",
               "seq2seq-lm": "AutoModelForSeq2SeqLM", "image-classification": "AutoModelForImageClassification"}


def build_hf(spec_name: str, params: dict) -> tuple[nn.Sequential, Callable, Callable]:
    """(module, example_batch, loss) for ``build_model``; the model is built under the
    caller's device (``meta`` to count parameters) and RNG seed."""
    tf = _transformers()
    family, config, size = configure(spec_name, params)
    auto = getattr(tf, MODEL_CLASS[family.task])
    model = auto.from_config(config)
    model.train()
    from collections import OrderedDict
    module = nn.Sequential(OrderedDict(_layout(family, model, config)))
    # transformers' own initialisation of one module (normal weights, unit norms, rotary
    # frequencies), for mcap.models.stage.build_stage, which materialises a stage's layers
    # of a model built on the meta device
    module.mcap_init = model._init_weights
    if family.inputs == "image":
        classes = config.num_labels
        return module, _images(size, config.num_channels, classes), F.cross_entropy
    if family.task == "seq2seq-lm":
        from mcap.models.hft5 import t5_batch
        return module, t5_batch(config.vocab_size, size), _token_loss
    return module, _tokens(config.vocab_size, size), _token_loss


def _token_loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy over every position (transformers' LM losses; memory is the same
    whether labels are shifted or masked)."""
    return F.cross_entropy(output.reshape(-1, output.shape[-1]), targets.reshape(-1))


def _tokens(vocab: int, seq: int) -> Callable:
    def example_batch(batch_size: int, seed: int = 0):
        check_allocation(f"a batch of {batch_size} sequences of {seq} tokens", 2 * 8 * batch_size * seq)
        g = torch.Generator()
        g.manual_seed(seed)
        ids = torch.randint(0, vocab, (batch_size, seq), generator=g)
        return ids, torch.randint(0, vocab, (batch_size, seq), generator=g)
    return example_batch


def _images(size: int, channels: int, classes: int) -> Callable:
    def example_batch(batch_size: int, seed: int = 0):
        check_allocation(f"a batch of {batch_size} images of {size}x{size}",
                         4 * channels * batch_size * size * size)
        g = torch.Generator()
        g.manual_seed(seed)
        x = torch.randn(batch_size, channels, size, size, generator=g)
        return x, torch.randint(0, classes, (batch_size,), generator=g)
    return example_batch
