"""Building only a stage's layers (issue 41, item 2): every model on the meta device, layers
first..last materialised on a device, their sizes, and host memory bounded by the stage."""
import json
import subprocess
import sys

import pytest
import torch

from mcap.core.errors import McapError
from mcap.models import build_model, count_parameters
from mcap.models.stage import build_stage, layer_sizes
from tests.conftest import REPO

SMALL = {
    "gpt2": "hf:gpt2:n_layer=2,n_embd=64,n_head=4,seq=32",
    "bert": "hf:bert:num_hidden_layers=2,hidden_size=64,num_attention_heads=4,intermediate_size=128,seq=32",
    "llama": "hf:llama:num_hidden_layers=3,hidden_size=64,num_attention_heads=4,num_key_value_heads=2,"
             "intermediate_size=128,vocab_size=1000,seq=32",
    "qwen2": "hf:qwen2:num_hidden_layers=2,hidden_size=64,num_attention_heads=4,num_key_value_heads=2,"
             "intermediate_size=128,vocab_size=1000,seq=32",
    "resnet": "hf:resnet:depths=1/1/1/1,image_size=64",
    "t5": "hf:t5:num_layers=2,num_decoder_layers=2,d_model=64,d_kv=16,d_ff=128,num_heads=4,"
          "vocab_size=1000,seq=16",
    "gpt": "gpt:layers=2,hidden=64",
    "vgg11": "vgg11:image_size=32",
    "amoebanet": "amoebanet-d:layers=3,filters=16",
}


def _forward(module, x):
    return module(*x) if isinstance(x, tuple) else module(x)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_a_stage_is_the_whole_models_layers_and_trains(name):
    spec = SMALL[name]
    whole = build_model(spec)
    L = whole.info.num_layers
    for first, last in ((0, L - 1), (1, L - 2), (L - 1, L - 1)):
        stage = build_stage(spec, first, last)
        sliced = whole.module[first:last + 1]
        assert [n for n, _ in stage.module.named_children()] == [n for n, _ in sliced.named_children()]
        assert [(n, tuple(p.shape)) for n, p in stage.module.named_parameters()] == \
               [(n, tuple(p.shape)) for n, p in sliced.named_parameters()]
        assert all(p.device.type == "cpu" for p in stage.module.parameters())
        assert stage.info == whole.info
    full = build_stage(spec, 0, L - 1)
    x, y = full.example_batch(2)
    loss = full.loss(_forward(full.module, x), y)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in full.module.parameters()
               if p.requires_grad and p.grad is not None)


def test_a_layer_has_the_same_values_whichever_stage_builds_it():
    spec = SMALL["llama"]
    a, b = build_stage(spec, 1, 2), build_stage(spec, 2, 3)
    for (na, pa), (nb, pb) in zip(a.module[1].named_parameters(), b.module[0].named_parameters()):
        assert na == nb and torch.equal(pa, pb)
    other = build_stage(spec, 2, 3, seed=1)
    assert not torch.equal(next(b.module[0].parameters()), next(other.module[0].parameters()))
    # the rotary frequencies are transformers' own, not the meta model's placeholders
    emb = build_stage(spec, 0, 0).module[0]
    assert torch.isfinite(emb.rotary_emb.inv_freq).all() and emb.rotary_emb.inv_freq[0] == 1.0


def test_a_tied_weight_is_one_parameter_in_a_stage_holding_both_layers():
    spec = SMALL["gpt2"]
    whole = build_model(spec)
    L = whole.info.num_layers
    both = build_stage(spec, 0, L - 1)
    assert both.module[0].wte.weight is both.module[L - 1].module_.weight
    assert both.param_bytes == sum(p.numel() * p.element_size() for p in whole.module.parameters())
    head = build_stage(spec, L - 1, L - 1)  # its own copy, counted in the head's bytes
    assert head.param_bytes == whole.info.layers[L - 1].param_bytes > 0


def test_layers_outside_the_model_are_refused():
    with pytest.raises(McapError, match=r"layers 3\.\.9 are not a stage of .* layers 0\.\.5"):
        build_stage(SMALL["llama"], 3, 9)


def test_layer_sizes_count_what_a_forward_saves():
    spec = SMALL["llama"]
    sizes = layer_sizes(spec, micro_batch=2)
    info = build_model(spec, device="meta").info
    assert [(s.name, s.kind, s.param_bytes) for s in sizes] == \
           [(l.name, l.kind, l.param_bytes) for l in info.layers]
    # what a real CPU forward saves for backward, counted the same way
    stage = build_stage(spec, 0, info.num_layers - 1)
    x, _ = stage.example_batch(2)
    real = []
    for layer in stage.module:
        seen = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            x = _forward(layer, x)
        real.append(sum(seen.values()))
    blocks = [i for i, l in enumerate(info.layers) if l.kind == "LlamaDecoderLayer"]
    for i in blocks:  # meta runs attention's math path: an upper estimate, within 1.5x
        assert real[i] <= sizes[i].saved_bytes <= 1.5 * real[i]
    head = info.num_layers - 1
    assert sizes[head].saved_bytes == real[head]
    assert sizes[head].output_bytes == 2 * 32 * 1000 * 4  # logits: batch x seq x vocab, fp32


@pytest.mark.parametrize("name,billions", [
    # the parameter counts their model cards give
    ("llama-3.2-1b", 1.24), ("llama-3.2-3b", 3.21), ("llama-3.1-8b", 8.03), ("qwen2.5-7b", 7.62),
    ("gpt2-xl", 1.56)])
def test_named_configurations_have_their_public_sizes(name, billions):
    assert round(count_parameters(f"hf:{name}") / 1e9, 2) == billions


@pytest.mark.integration
def test_one_block_of_llama_3_1_8b_is_built_without_the_whole_model():
    """The whole model is 32 GB of fp32 weights, more than this machine has; one block is
    0.87 GB. A fresh process builds layer 1 only: its peak resident memory grows by about
    the block, never by the model (pytorch issue 136226: the dry run builds it all)."""
    code = (
        "import json, resource, torch, transformers\n"
        "import mcap.models.hf\n"
        "from mcap.models.stage import build_stage\n"
        "rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024\n"
        "page = resource.getpagesize()\n"
        "before = int(open('/proc/self/statm').read().split()[1]) * page  # resident now\n"
        "s = build_stage('hf:llama-3.1-8b', 1, 1)\n"
        "print(json.dumps({'before': before, 'after': rss(), 'stage': s.param_bytes,\n"
        "                  'whole': sum(l.param_bytes for l in s.info.layers)}))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    grew = got["after"] - got["before"]
    assert grew <= 1.5 * got["stage"] + 2**28, got  # the block, and the meta model's objects
    assert 20 * grew < got["whole"], got


def test_one_meta_model_gives_every_stage_its_layers():
    from mcap.models.stage import materialise, meta_model
    spec = SMALL["gpt2"]
    module, _, _, info = meta_model(spec)
    whole = materialise(module, 0, info.num_layers - 1)
    part = materialise(module, 1, 2)
    assert all(p.device.type == "meta" for p in module.parameters())  # left as it was
    assert torch.equal(whole[1].block.attn.c_attn.weight, part[0].block.attn.c_attn.weight)
    assert torch.equal(part[1].block.mlp.c_fc.weight, build_stage(spec, 2, 2).module[0].block.mlp.c_fc.weight)
