"""Built-in and user models: layer counts, parameter counts, specs, training steps."""
from __future__ import annotations

import textwrap

import pytest
import torch

from mcap.core.errors import McapError, UnknownModel
from mcap.models import KNOWN_MODELS, build_model, count_parameters, normalise_spec, parse_spec


def test_vgg11_imagenet_is_30_layers_and_132_9m_parameters():
    built = build_model("vgg11:image_size=224,classes=1000", device="meta")
    assert built.info.num_layers == 30
    assert count_parameters("vgg11:image_size=224,classes=1000") == 132_863_336
    # param bytes per layer add up to the model's (fp32)
    assert sum(l.param_bytes for l in built.info.layers) == 132_863_336 * 4
    names = [l.name for l in built.info.layers]
    assert len(set(names)) == 30 and names[:3] == ["conv1_1", "relu1_1", "pool1"]
    assert names[21:23] == ["avgpool", "flatten"] and names[-1] == "fc3"


def test_vgg11_small_images_train_one_step():
    built = build_model("vgg11:image_size=32,classes=10,hidden=64")
    x, y = built.example_batch(2)
    assert x.shape == (2, 3, 32, 32) and y.shape == (2,)
    built.loss(built.module(x), y).backward()
    assert all(p.grad is not None for p in built.module.parameters())


def test_amoebanet_d_36_544_matches_paper_1_06b():
    assert round(count_parameters("amoebanet-d:layers=36,filters=544,image_size=224,classes=1000")
                 / 1e9, 2) == 1.06


def test_amoebanet_layers_are_l_plus_6_and_any_split_runs():
    built = build_model("amoebanet-d:layers=3,filters=16")
    assert built.info.num_layers == 9
    x, y = built.example_batch(2)
    # a stage receives the previous stage's (state, skip) tuple as separate arguments
    head, tail = built.module[:4], built.module[4:]
    mid = head(x)
    assert isinstance(mid, tuple) and len(mid) == 2
    out = tail[0](*mid)
    for layer in tail[1:]:
        out = layer(out)
    assert out.shape == (2, 10)
    built.loss(out, y).backward()


def test_gpt_is_embedding_blocks_head():
    built = build_model("gpt:layers=2,hidden=32,heads=2,vocab=50,seq=8")
    assert [l.name for l in built.info.layers] == ["embed", "block1", "block2", "head"]
    ids, targets = built.example_batch(3)
    out = built.module(ids)
    assert out.shape == (3, 8, 50)
    built.loss(out, targets).backward()


def test_weights_and_batches_are_seeded_and_leave_global_rng_alone():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("gpt:layers=1,hidden=16,heads=2,vocab=20,seq=4")
    b = build_model("gpt:layers=1,hidden=16,heads=2,vocab=20,seq=4")
    assert torch.equal(torch.rand(1), before)
    for pa, pb in zip(a.module.parameters(), b.module.parameters()):
        assert torch.equal(pa, pb)
    assert torch.equal(a.example_batch(2, seed=5)[0], b.example_batch(2, seed=5)[0])
    assert not torch.equal(a.example_batch(2, seed=5)[0], a.example_batch(2, seed=6)[0])


def test_spec_normalised_with_defaults():
    assert parse_spec("vgg11") == ("vgg11", {"image_size": 32, "classes": 10, "hidden": 4096})
    assert normalise_spec("vgg11:classes=5") == "vgg11:image_size=32,classes=5,hidden=4096"
    assert build_model("gpt:layers=1").info.spec.startswith("gpt:layers=1,hidden=")


def test_unknown_model_lists_known():
    with pytest.raises(UnknownModel) as err:
        parse_spec("resnet50")
    assert "resnet50" in str(err.value)
    for name in KNOWN_MODELS:
        assert name in str(err.value)


def test_unknown_parameter_lists_parameters():
    with pytest.raises(UnknownModel, match=r"no parameter 'depth'.*image_size=32"):
        parse_spec("vgg11:depth=3")
    with pytest.raises(UnknownModel, match="integer"):
        parse_spec("gpt:layers=two")


@pytest.mark.parametrize("spec, message", [
    ("amoebanet-d:layers=4", "multiple of 3, got 4"),
    ("vgg11:image_size=40", "multiple of 32, got 40"),
    ("gpt:hidden=30,heads=4", "heads=4 must divide hidden=30"),
])
def test_bad_values_name_them(spec, message):
    with pytest.raises(McapError, match=message):
        build_model(spec, device="meta")


def test_user_model_contract(tmp_path, monkeypatch):
    from mcap.models import trusted  # typed by a person: user code may run (issue 12)
    (tmp_path / "mcap_test_user_model.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn

        def make(width=4):
            seq = nn.Sequential(nn.Linear(3, width), nn.ReLU(), nn.Linear(width, 2))
            def batch(batch_size, seed=0):
                g = torch.Generator().manual_seed(seed)
                return torch.randn(batch_size, 3, generator=g), torch.randint(0, 2, (batch_size,), generator=g)
            return seq, batch, nn.functional.cross_entropy

        def wrong():
            return nn.Linear(2, 2)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    built = build_model(trusted("mcap_test_user_model:make:width=5"))
    assert built.info.num_layers == 3
    assert built.info.layers[0].param_bytes == (3 * 5 + 5) * 4
    x, y = built.example_batch(4)
    built.loss(built.module(x), y).backward()
    with pytest.raises(McapError, match="must return"):
        build_model(trusted("mcap_test_user_model:wrong"))
    with pytest.raises(UnknownModel, match="no callable 'missing'"):
        build_model(trusted("mcap_test_user_model:missing"))
    with pytest.raises(UnknownModel, match="cannot import"):
        build_model(trusted("no_such_pkg_xyz.mod:make"))


def test_a_standard_library_function_is_never_called_as_a_model(monkeypatch):
    """``--model os:system:command=...`` typed on a command line: refused naming the module,
    before anything is imported or called."""
    import os
    import subprocess

    from mcap.models import trusted
    called = []
    monkeypatch.setattr(os, "system", lambda *a, **k: called.append(a) or 0)
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: called.append(a))
    for spec in ("os:system:command=true", "os:system", "subprocess:run:args=true",
                 "os.path:join", "builtins:exec:source=x"):
        with pytest.raises(UnknownModel, match="standard library"):
            build_model(trusted(spec))
    assert called == []
