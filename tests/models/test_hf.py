"""Hugging Face architectures by name, and any nn.Module split by the pipeline tracer (issue 29).

Unit tests check the spec (pure), the keys (against transformers' own configuration
classes) and that the layers mCAP sees compute exactly what the transformers model computes.
The integration tests profile, predict, recommend and measure a tiny configuration of each
family with real stage processes on the CPU.
"""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import torch

from mcap.core.errors import McapError, UnknownModel
from mcap.models import build_model, count_parameters, normalise_spec, parse_spec
from mcap.models.spec import check_trusted, is_user_spec
from tests.conftest import REPO


TINY = {
    "gpt2": "hf:gpt2:n_layer=2,n_embd=64,n_head=4,vocab_size=256,seq=32",
    "bert": "hf:bert:num_hidden_layers=2,hidden_size=64,intermediate_size=128,num_attention_heads=4,"
            "vocab_size=256,seq=32",
    "llama": "hf:llama:num_hidden_layers=2,hidden_size=64,intermediate_size=128,num_attention_heads=4,"
             "num_key_value_heads=2,vocab_size=256,seq=32",
    "vit": "hf:vit:num_hidden_layers=2,hidden_size=64,intermediate_size=128,num_attention_heads=4,"
           "patch_size=8,image_size=32",
    "resnet": "hf:resnet:depths=1/1,hidden_sizes=32/64,embedding_size=16,layer_type=basic,image_size=32",
    "t5": "hf:t5:num_layers=2,num_decoder_layers=2,d_model=64,d_kv=16,d_ff=128,num_heads=4,"
          "vocab_size=256,seq=16",
}


# --- the spec, pure -------------------------------------------------------------------------

def test_hf_specs_are_built_in_normalised_and_trusted():
    name, params = parse_spec("hf:gpt2:n_layer=4,seq=256")
    assert name == "hf:gpt2" and params == {"n_layer": 4, "seq": 256}
    assert parse_spec("hf:gpt2")[1] == {"seq": 128}  # the family's default input size
    assert parse_spec("hf:llama-3.2-1b")[1] == {"seq": 2048}  # the named configuration's
    assert parse_spec("hf:resnet:depths=2/2/2/2")[1] == {"depths": [2, 2, 2, 2], "image_size": 224}
    # equal models, equal strings: keys sorted, the input last
    assert normalise_spec(" hf:gpt2:seq=64,n_layer=2,n_embd=64 ") == "hf:gpt2:n_embd=64,n_layer=2,seq=64"
    assert normalise_spec("hf:bert:attention_probs_dropout_prob=0.0,hidden_act=gelu") == \
        "hf:bert:attention_probs_dropout_prob=0.0,hidden_act=gelu,seq=128"
    assert not is_user_spec("hf:gpt2") and not is_user_spec("hf:llama-3.2-1b")
    check_trusted("hf:gpt2:n_layer=2")  # a file naming one runs no user code: no confirmation


@pytest.mark.parametrize("spec,message", [
    ("hf:gpt9", "unknown Hugging Face model 'gpt9'"),
    ("hf:meta-llama/Llama-3.2-1B", "unknown Hugging Face model"),
    ("hf:gpt2:n_layer", "expected key=value"),
    ("hf:gpt2:seq=0", "seq must be an integer from 1"),
    ("hf:gpt2:seq=1.5", "seq must be an integer"),
    ("hf:vit:seq=64", "give image_size=, not seq="),
    ("hf:gpt2:n_layer=2,n_layer=3", "n_layer is given twice"),
    ("hf:gpt2:activation_function=$(rm)", "is not a number, true/false"),
    ("hf:gpt2:n_embd=nan", "not a finite number"),
])
def test_bad_hf_specs_name_the_value(spec, message):
    with pytest.raises(UnknownModel, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("$", r"\$")):
        parse_spec(spec)


def test_hf_spec_is_checked_without_torch():
    """`profile --model hf:gpt9` exits 2 naming it in an interpreter where torch cannot load."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] in ('torch', 'transformers'):\n"
            "            raise ImportError('blocked in this test')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from mcap.models import parse_spec, normalise_spec\n"
            "assert normalise_spec('hf:gpt2:seq=64') == 'hf:gpt2:seq=64'\n"
            "from mcap.cli.main import main\n"
            "sys.exit(main(['profile', '--model', 'hf:gpt9', '--stages', '2', '--out', 'x.json']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(REPO), env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr
    assert "unknown Hugging Face model 'gpt9'" in done.stderr and "Traceback" not in done.stderr


# --- keys against transformers' configuration classes -----------------------------------------

@pytest.mark.parametrize("spec,message", [
    ("hf:gpt2:bogus=3", "gpt2 has no configuration key 'bogus'"),
    ("hf:gpt2:use_cache=true", "no configuration key 'use_cache'"),  # the runtime decides
    ("hf:gpt2:n_layer=2.5", "n_layer=2.5 must be an integer"),
    ("hf:gpt2:n_layer=-1", "must be from 0 to"),
    ("hf:gpt2:tie_word_embeddings=1", "must be true or false"),
    ("hf:gpt2:attn_pdrop=1.5", "dropout probability must be in"),
    ("hf:gpt2:seq=2048", "seq=2048 is longer than the model's 1024 positions"),
    ("hf:gpt2:n_embd=60,n_head=8", "num_attention_heads=8 must divide hidden_size=60"),
    ("hf:gpt2:attn_implementation=flash", "attn_implementation must be one of sdpa, eager"),
    ("hf:vit:image_size=30", "image_size=30 must be a multiple of patch_size=16"),
    ("hf:resnet:depths=1/1,hidden_sizes=8/16/32", "one entry per stage"),
    ("hf:resnet:image_size=16", "image_size >= 32"),
    ("hf:resnet:attn_implementation=sdpa", "no configuration key 'attn_implementation'"),
    ("hf:gpt2:n_layer=2000000000", "num_hidden_layers=2000000000: at most 4,096 blocks"),
    ("hf:resnet:depths=5000/1", "depths sum to 5001"),
])
def test_keys_are_checked_before_anything_is_built(spec, message):
    with pytest.raises(UnknownModel, match=message):
        build_model(spec, device="meta")


def test_a_model_too_large_for_memory_is_refused_before_allocating():
    from mcap.models import TooLarge
    with pytest.raises(TooLarge, match="bytes of parameters"):
        build_model("hf:llama:hidden_size=65536,intermediate_size=262144,num_attention_heads=64,"
                    "num_key_value_heads=64,num_hidden_layers=64,seq=16")


# --- the layers mCAP sees --------------------------------------------------------------------

def _reference(spec):
    """The transformers model itself, built as build_model builds it (same seed)."""
    from mcap.models import hf
    name, params = parse_spec(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        family, config, _ = hf.configure(name, params)
        import transformers
        return getattr(transformers, hf.MODEL_CLASS[family.task]).from_config(config)


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "vit", "resnet", "t5"])
def test_the_layers_compute_what_the_transformers_model_computes(family):
    spec = TINY[family]
    built = build_model(spec)
    model = _reference(spec)
    built.module.eval()
    model.eval()  # dropout off, so the two forwards are comparable
    x, _ = built.example_batch(3)
    with torch.no_grad():
        ours = built.module(x)
        if family == "t5":
            ids, dec = x[:, 0], x[:, 1]
            theirs = model(input_ids=ids, decoder_input_ids=dec).logits
        elif family in ("vit", "resnet"):
            theirs = model(pixel_values=x).logits
        else:
            theirs = model(input_ids=x).logits
    torch.testing.assert_close(ours, theirs)
    assert count_parameters(spec) == sum(p.numel() for p in model.parameters())


def test_gpt2_layers_are_embeddings_blocks_norm_head_with_a_tied_weight():
    built = build_model("hf:gpt2:n_layer=3,n_embd=64,n_head=4,vocab_size=256,seq=32")
    assert [l.name for l in built.info.layers] == ["embeddings", "block0", "block1", "block2",
                                                   "ln_f", "lm_head"]
    assert [l.kind for l in built.info.layers][1:4] == ["GPT2Block"] * 3
    m = built.module
    assert m.lm_head.module_.weight is m.embeddings.wte.weight  # one Parameter, two layers
    tied = 256 * 64 * 4
    assert built.info.layers[-1].param_bytes == tied  # the head's stage pays the weight
    assert built.info.layers[0].param_bytes == tied + 1024 * 64 * 4  # wte + wpe (n_positions rows)
    # a stage holding both holds one copy; a stage of the head alone, its own
    import copy
    both = copy.deepcopy(m[0:6])
    assert both.lm_head.module_.weight is both.embeddings.wte.weight
    head = copy.deepcopy(m[5:6])
    assert head.lm_head.module_.weight is not m.embeddings.wte.weight


def test_training_setup_cache_off_sdpa_dropout_on():
    built = build_model(TINY["gpt2"])
    block = built.module.block0.block
    assert block.attn.config.use_cache is False
    assert block.attn.config._attn_implementation == "sdpa"
    assert built.module.training and block.attn.attn_dropout.p == 0.1
    eager = build_model(TINY["llama"] + ",attn_implementation=eager")
    x, _ = eager.example_batch(2)
    out = eager.module.embeddings(x)
    assert len(out) == 4  # hidden, cos, sin, the causal mask the blocks read
    assert out[3].shape == (2, 1, 32, 32)


def test_list_layers(capsys):
    from mcap.cli.main import main
    assert main(["plan", "--model", "hf:gpt2:n_layer=2", "--list-layers"]) == 0
    out = capsys.readouterr().out
    assert "5 layers of hf:gpt2:n_layer=2" in out
    assert "transformer.h.1" in out and "lm_head" in out
    assert "embeddings and lm_head share one 147.24 MiB weight (50257, 768) (tied)" in out
    assert main(["plan", "--model", "hf:gpt2:n_layer=2", "--list-layers", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert [l["name"] for l in d["layers"]] == ["embeddings", "block0", "block1", "ln_f", "lm_head"]
    assert main(["plan", "--model", "hf:gpt2:n_layer=2", "--stages", "2"]) == 0
    assert "profiling runs for 5 layers on 2 stages" in capsys.readouterr().out
    assert main(["plan", "--list-layers"]) == 2
    assert main(["plan", "--model", "hf:gpt2:n_layer=2,bogus=1", "--list-layers"]) == 2
    assert "no configuration key 'bogus'" in capsys.readouterr().err


def test_named_configurations_say_where_they_come_from():
    from mcap.models import hfspec
    named = hfspec.named_configs()
    assert {"llama-3.2-1b", "bert-base-uncased", "vit-base-patch16-224", "resnet-50"} <= set(named)
    for n in named.values():
        assert n.source and n.model_type in hfspec.FAMILIES
    # Llama 3.2 1B: 1.24 B parameters with its tied embedding counted once
    assert count_parameters("hf:llama-3.2-1b") == 1_235_814_400
    assert count_parameters("hf:bert-base-uncased") == 109_514_298  # BertForMaskedLM
    assert count_parameters("hf:gpt2") == 124_439_808


# --- a model that is not a sequence, split by the tracer ----------------------------------------

def test_tracer_splits_a_dict_of_residual_blocks_with_a_skip():
    from tests.models import traced_models
    built = build_model("tests.models.traced_models:skipnet", allow_user_code=True)
    assert [l.name for l in built.info.layers] == ["embed", "blocks_b0", "blocks_b1", "blocks_b2",
                                                   "blocks_b3", "head"]
    assert [l.kind for l in built.info.layers] == ["Linear"] + ["Residual"] * 4 + ["Linear"]
    x, y = built.example_batch(5)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        ref = traced_models.SkipNet(32, 4)
    torch.testing.assert_close(built.module(x), ref(x))
    # the skip passes through the blocks: each block hands on (h, skip)
    h = built.module[0](x)
    assert isinstance(built.module[1](h), tuple) and len(built.module[1](h)) == 2
    # the batch dimension is free: any micro-batch size runs
    assert built.module(x[:1]).shape == (1, 10)
    named = build_model("tests.models.traced_models:skipnet_named", allow_user_code=True)
    assert [l.name for l in named.info.layers] == ["embed", "blocks_b0", "blocks_b2"]


def test_tracer_refuses_naming_the_layer():
    with pytest.raises(McapError, match=r"cannot be split by the pipeline tracer: in layer "
                                        r"'blocks.b2' \(DataDependent\), traced_models.py:\d+"):
        build_model("tests.models.traced_models:untraceable", allow_user_code=True)
    with pytest.raises(McapError, match="no submodule named 'nope'"):
        from mcap.models import traced
        from tests.models.traced_models import SkipNet, _batch
        traced.split(SkipNet(8, 2), _batch(2)[0], ["embed", "nope"])


def test_a_traced_user_model_still_needs_the_confirmation():
    from mcap.models import UntrustedCode
    with pytest.raises(UntrustedCode):
        build_model("tests.models.traced_models:skipnet")


# --- end to end with real stage processes ------------------------------------------------------

def _end_to_end(spec, tmp_path, stages=2):
    """profile, then predict and recommend from the file (CLI), then measure the pick."""
    from mcap.io import jsonio
    from mcap.runner import open_runner
    from mcap.store import Store
    from mcap.core.types import Setup
    from mcap.workflow.profiling import ProfileRequest, profile

    setup = Setup(stages=stages, batch_size=4, chunks=2)
    out = tmp_path / "p.profile.json"
    result = profile(ProfileRequest(spec, setup, out, stream=io.StringIO()), store=Store(tmp_path / "s.sqlite"))
    assert all(r.status == "ok" for r in result.profile.runs), [r.error for r in result.profile.runs]
    done = subprocess.run([sys.executable, "-m", "mcap", "recommend", "--profile", str(out),
                           "--stages", str(stages), "--json"], capture_output=True, text=True,
                          cwd=str(REPO), timeout=120)
    assert done.returncode == 0, done.stderr
    rec = json.loads(done.stdout)
    balance = tuple(rec["balance"])
    done = subprocess.run([sys.executable, "-m", "mcap", "predict", "--profile", str(out),
                           "--balance", ",".join(map(str, balance)), "--json"],
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)
    assert done.returncode == 0, done.stderr
    predicted = json.loads(done.stdout)["predicted_peaks"]
    with open_runner(spec, setup, timeout=180) as runner:
        run = runner.measure(balance)
    assert run.status == "ok", run.error
    assert jsonio.load_profile(out).model.spec == normalise_spec(spec)
    return balance, predicted, run.peaks


@pytest.mark.integration
@pytest.mark.parametrize("family", ["gpt2", "bert", "llama", "vit", "resnet"])
def test_profile_predict_recommend_measure(family, tmp_path):
    balance, predicted, measured = _end_to_end(TINY[family], tmp_path)
    # the recommended split is predicted within 5% of what it measures on every stage
    for p, m in zip(predicted, measured):
        assert abs(p - m) / m <= 0.05, (family, balance, predicted, measured)


@pytest.mark.integration
def test_traced_user_model_end_to_end(tmp_path):
    from mcap.models import trusted
    balance, predicted, measured = _end_to_end(trusted("tests.models.traced_models:skipnet"), tmp_path, 3)
    assert len(measured) == 3 and all(m > 0 for m in measured)


# --- the bundled GPT-2 example on every page ---------------------------------------------------

GPT2_PROFILE = "bundled:gpt2-l12-h256-s256-cpu4.profile.json"
GPT2_SWEEP = "bundled:gpt2-l12-h256-s256-cpu4-full.sweep.json"


def test_the_gpt2_example_is_the_second_bundled_choice_and_meets_the_targets():
    from mcap.core.evaluate import evaluate
    from mcap.io import datasets
    from pages._shared import DEFAULTS, EXAMPLES, example_rank
    for kind, ref in (("profile", GPT2_PROFILE), ("sweep", GPT2_SWEEP)):
        refs = sorted((r for r in datasets.bundled() if r.kind == kind), key=lambda r: example_rank(kind, r))
        assert [r.param for r in refs[:2]] == [DEFAULTS[kind], ref] == list(EXAMPLES[kind])
    profile = datasets.load(datasets.parse_ref(GPT2_PROFILE))
    sweep = datasets.load(datasets.parse_ref(GPT2_SWEEP))
    assert profile.model.spec == "hf:gpt2:n_embd=256,n_head=4,seq=256" and len(profile.model.layers) == 15
    assert len(sweep.runs) == 364 and all(r.status == "ok" for r in sweep.runs)
    from mcap.core.recommend import recommend
    report = evaluate(profile, sweep, (recommend(profile, 4, "exact"),))
    assert report.errors.p90 <= 0.01  # the default predictor (issue 29 target)
    assert report.picks[0].ratio <= 1.01


@pytest.mark.app
@pytest.mark.parametrize("name", ["overview", "profile", "layers", "predict", "space", "recommend",
                                  "hybrid", "scaling", "savers", "explained", "present"])
def test_every_page_opens_the_gpt2_example(name, tmp_store):
    from streamlit.testing.v1 import AppTest
    if name == "explained":
        from tests.conftest import warm_orders
        warm_orders()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.query_params["profile"] = GPT2_PROFILE
    at.query_params["sweep"] = GPT2_SWEEP
    at.run()
    if name != "overview":
        at.switch_page(f"pages/{name}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    text = " ".join(str(m.value) for m in at.markdown) + " ".join(str(s.value) for s in at.subheader)
    if name == "overview":
        assert "hf:gpt2:n_embd=256,n_head=4,seq=256" in text


@pytest.mark.integration
@pytest.mark.parametrize("spec,balance", [
    (TINY["llama"] + ",attn_implementation=eager", (2, 3)),  # carries cos, sin and a mask
    (TINY["t5"], (3, 3, 3)),  # carries decoder ids, encoder states, position biases
    ("tests.models.traced_models:skipnet", (2, 2, 2)),  # the skip passes through the blocks
])
def test_stages_alone_read_what_they_read_running_together(spec, balance):
    """What is carried across a stage boundary is allocated alone as a real send allocates it
    (ARCHITECTURE.md, Measuring: a stage's truth is what it reads alone)."""
    from mcap.core.types import Setup
    from mcap.models import trusted
    from mcap.runner import open_runner
    setup = Setup(stages=len(balance), batch_size=4, chunks=2)
    peaks = {}
    for isolation in ("stage", "pipeline"):
        with open_runner(trusted(spec), setup, timeout=180, isolation=isolation) as runner:
            run = runner.measure(balance)
        assert run.status == "ok", run.error
        peaks[isolation] = run.peaks
    assert peaks["stage"] == peaks["pipeline"]


@pytest.mark.integration
def test_press_and_hybrid_plans_on_a_transformers_model(tmp_path, monkeypatch, capsys):
    """MPress plans (swap / recompute per layer) and CAPTURE hybrid plans (a tp2 stage
    shards Llama's Linear layers) run on the laid-out blocks, predicted and measured.
    The commands run in this process (``mcap.cli.main``, as tests.conftest.cli does): each
    ``python -m mcap`` child imported torch and transformers again (about 4 CPU s) before
    starting the same stage processes."""
    from mcap.cli.main import main
    spec = TINY["llama"]
    monkeypatch.chdir(tmp_path)

    def cli(*argv):
        code = main(list(argv))
        out, err = capsys.readouterr()
        assert code == 0 and "Traceback" not in err, err
        return out

    store = str(tmp_path / "s.sqlite")
    cli("profile", "--model", spec, "--stages", "2", "--batch-size", "4", "--chunks", "2",
        "--checkpoint", "never", "--press", "--store", store, "--out", "press.profile.json")
    before = json.loads(cli("predict", "--profile", "press.profile.json", "--balance", "3,2", "--json"))
    capacity = int(max(before["predicted_peaks"]) * 0.8)
    cli("press", "--profile", "press.profile.json", "--balance", "3,2", "--capacity", str(capacity),
        "--out", "plan.json")
    run = json.loads(cli("measure", "--model", spec, "--stages", "2", "--batch-size", "4", "--chunks", "2",
                         "--checkpoint", "never", "--balance", "3,2", "--press", "plan.json",
                         "--store", store, "--json"))
    assert max(run["peaks"]) <= capacity * 1.02, (run["peaks"], capacity)

    cli("profile", "--model", spec, "--stages", "4", "--batch-size", "8", "--chunks", "2",
        "--parallel", "dp,tp", "--store", store, "--out", "hybrid.profile.json")
    predicted = json.loads(cli("predict", "--profile", "hybrid.profile.json", "--plan", "1,2:tp2,2",
                               "--json"))
    measured = json.loads(cli("measure", "--model", spec, "--stages", "4", "--batch-size", "8",
                              "--chunks", "2", "--plan", "1,2:tp2,2", "--store", store, "--json"))
    for p, m in zip(predicted["predicted_peaks"], measured["peaks"]):
        assert abs(p - m) / m <= 0.10, (predicted, measured)


def test_scaling_varies_a_key_the_spec_writes():
    from mcap.workflow.scaling import spec_with
    assert spec_with("hf:resnet:depths=1/1,hidden_sizes=32/64,embedding_size=16", "embedding_size", 32) \
        == "hf:resnet:depths=1/1,embedding_size=32,hidden_sizes=32/64,image_size=224"
    assert spec_with("hf:gpt2:n_layer=4", "n_layer", 8) == "hf:gpt2:n_layer=8,seq=128"
    with pytest.raises(McapError, match=r"write: hf:gpt2:n_layer=N|writes: hf:gpt2:n_layer=N"):
        spec_with("hf:gpt2", "n_layer", 8)
