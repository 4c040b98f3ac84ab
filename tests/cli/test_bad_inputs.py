"""Every bad input is exit 2 with the values named, never a traceback (issue 12, items 4
and 5); resource limits are checked before anything is allocated or measured."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from mcap.core.errors import McapError
from tests.conftest import DATA, cli

PROFILE = DATA / "vgg11-cpu4.profile.json"
SWEEP = DATA / "vgg11-cpu4-sample300.sweep.json"


# --- resource limits, before allocating --------------------------------------------------

@pytest.mark.parametrize("spec,needle", [
    ("vgg11:hidden=200000", "bytes of parameters"),
    ("vgg11:image_size=3200000", "bytes of parameters"),
    ("gpt:vocab=99999999999", "bytes of parameters"),
    ("gpt:vocab=999999999999999999999999", "cannot be built"),
])
def test_a_model_that_cannot_fit_is_refused_before_any_run(capsys, tmp_path, spec, needle):
    started = time.process_time()  # this process's CPU seconds: not the machine's load
    code, _, err = cli(capsys, "profile", "--model", spec, "--stages", "4", "--store",
                       tmp_path / "s.sqlite", "--out", tmp_path / "p.json")
    assert code == 2 and needle in err and spec.split(":")[1].split("=")[1] in err
    assert time.process_time() - started < 30 and not (tmp_path / "p.json").exists()


def test_build_model_refuses_with_the_numbers():
    from mcap.models import TooLarge, build_model
    with pytest.raises(TooLarge, match=r"160,456,081,960 bytes of parameters"):
        build_model("vgg11:hidden=200000")


def test_plan_refuses_a_million_layers_at_once(capsys):
    started = time.process_time()
    code, _, err = cli(capsys, "plan", "--layers", "1000000", "--stages", "4")
    assert code == 2 and "limited to 512 layers" in err and "1,000,000" in err
    assert time.process_time() - started < 2


def test_sweep_without_sample_on_a_huge_space_is_refused(capsys, tmp_path):
    code, _, err = cli(capsys, "sweep", "--model", "gpt:layers=60,hidden=8,heads=2,vocab=8,seq=4",
                       "--stages", "8", "--store", tmp_path / "s.sqlite", "--out", tmp_path / "w.json")
    assert code == 2 and "use --sample N" in err and "would measure" in err


@pytest.mark.parametrize("cap,needle", [("2PiB", "above the limit of 1 PiB"),
                                        ("9" * 400, "above the limit"), ("0", "positive"),
                                        ("12 parsecs", "not a size")])
def test_capacities(capsys, tmp_path, cap, needle):
    code, _, err = cli(capsys, "profile", "--model", "vgg11", "--stages", "4", "--capacity", cap,
                       "--store", tmp_path / "s.sqlite", "--out", tmp_path / "p.json")
    assert code == 2 and needle in err


# --- command-line values -----------------------------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["recommend", "--profile", PROFILE, "--stages", "4", "--seed", "-1"], "seed"),
    (["recommend", "--profile", PROFILE, "--stages", "4", "--method", "bo", "--iterations", "0"], "got 0"),
    (["recommend", "--profile", PROFILE, "--stages", "4", "--tie-tolerance", "inf"], "finite"),
    (["recommend", "--profile", PROFILE, "--stages", "4", "--tie-tolerance", "nan"], "finite"),
    (["recommend", "--profile", PROFILE, "--stages", "4", "--tie-tolerance", "-0.1"], "between 0 and 1"),
    (["recommend", "--profile", PROFILE, "--stages", "0"], "got 0"),
    (["recommend", "--profile", PROFILE, "--stages", "-3"], "got -3"),
    (["recommend", "--profile", PROFILE, "--stages", "31"], "31"),
    (["recommend", "--profile", PROFILE, "--stages", "99999999999999999999999"], "integer"),
    (["predict", "--profile", PROFILE, "--balance", "3,a,5,19"], "3,a,5,19"),
    (["predict", "--profile", PROFILE, "--balance", "3,0,8,19"], "0 layers"),
    (["predict", "--profile", PROFILE, "--balance", "1e400,3,5,19"], "1e400"),
    (["evaluate", "--profile", PROFILE, "--sweep", SWEEP, "--seed", "-5"], "seed"),
    (["evaluate", "--profile", PROFILE, "--sweep", SWEEP, "--bo-iterations", "0"], "got 0"),
])
def test_bad_values_exit_2_naming_them(capsys, argv, needle):
    code, _, err = cli(capsys, *argv)
    assert code == 2 and needle in err and err.count("\n") == 1, err


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0"])
def test_timeouts(capsys, tmp_path, timeout):
    code, _, err = cli(capsys, "profile", "--model", "vgg11", "--stages", "4", "--timeout", timeout,
                       "--store", tmp_path / "s.sqlite", "--out", tmp_path / "p.json")
    assert code == 2 and "timeout" in err and timeout in err


def test_seed_of_sweep(capsys, tmp_path):
    code, _, err = cli(capsys, "sweep", "--model", "vgg11", "--stages", "4", "--seed", "-1",
                       "--sample", "3", "--store", tmp_path / "s.sqlite", "--out", tmp_path / "w.json")
    assert code == 2 and "seed" in err


@pytest.mark.parametrize("where", ["file", "proc"])
def test_store_that_cannot_be_opened(capsys, tmp_path, where):
    (tmp_path / "afile").write_text("x")
    store = tmp_path / "afile" / "s.sqlite" if where == "file" else Path("/proc/mcap-x/s.sqlite")
    code, _, err = cli(capsys, "sweep", "--model", "vgg11", "--stages", "4", "--sample", "2",
                       "--store", store, "--out", tmp_path / "w.json")
    assert code == 2 and str(store) in err


# --- loaded files ------------------------------------------------------------------------

def _profile(**change):
    d = json.loads(PROFILE.read_text())
    for path, value in change.items():
        target = d
        keys = path.split("__")
        for k in keys[:-1]:
            target = target[int(k)] if k.isdigit() else target[k]
        last = keys[-1]
        target[int(last) if last.isdigit() else last] = value
    return json.dumps(d)


@pytest.mark.parametrize("text,needle", [
    (_profile(mem_isolated__3=-5), "mem_isolated[3]"),
    (_profile(mem_isolated__3=10**30), "out of range"),
    (_profile(mem_added__3=-(10**30)), "out of range"),
    (_profile(mem_added__5=-(10**9)), "a real stage's peak is never negative"),
    (_profile(runs__0__peaks__0=-1), "runs[0].peaks"),
    (_profile(runs__0__seconds=1e308 * 10), "runs[0].seconds"),
    (_profile(setup__stages=0), "setup.stages"),
    (_profile(setup__chunks=0), "setup.chunks"),
    (_profile(setup__capacity_bytes=2**60), "setup.capacity_bytes"),
    (_profile(model__layers__0__param_bytes="12"), "param_bytes"),
    ("[" * 100000 + "]" * 100000, "nested deeper"),
    ('{"a": ' + "1" * 5000 + "}", "not usable JSON"),
    ("", "empty"),
    ("[1, 2, 3]", "top level"),
    ("\x00\x01\x02binary", "NUL"),
])
def test_bad_files_exit_2(capsys, tmp_path, text, needle):
    f = tmp_path / "bad.profile.json"
    f.write_text(text)
    for argv in (["predict", "--profile", f, "--balance", "3,3,5,19"],
                 ["recommend", "--profile", f, "--stages", "4"],
                 ["evaluate", "--profile", f, "--sweep", SWEEP, "--no-time"]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and needle in err, (argv, err)


def test_binary_and_utf16_files(capsys, tmp_path):
    f = tmp_path / "u.profile.json"
    f.write_bytes(PROFILE.read_text().encode("utf-16"))
    code, _, err = cli(capsys, "predict", "--profile", f, "--balance", "3,3,5,19")
    assert code == 2 and str(f) in err
    f.write_bytes(bytes(range(256)) * 4)
    code, _, err = cli(capsys, "predict", "--profile", f, "--balance", "3,3,5,19")
    assert code == 2 and str(f) in err


def test_evaluate_on_a_sweep_of_zero_peaks(capsys, tmp_path):
    d = json.loads(SWEEP.read_text())
    for r in d["runs"]:
        if r["peaks"]:
            r["peaks"] = [0] * len(r["peaks"])
    f = tmp_path / "z.sweep.json"
    f.write_text(json.dumps(d))
    code, _, err = cli(capsys, "evaluate", "--profile", PROFILE, "--sweep", f, "--no-time")
    assert code == 2 and "measured peak of 0 bytes" in err


@pytest.mark.parametrize("text", ["store:profile:" + "9" * 40, "store:profile:²", "store:sweep:0",
                                  "store:profile:-1", "store:profile:１"])
def test_query_string_ids(text):
    from mcap.io.datasets import parse_ref
    with pytest.raises(McapError, match="is not of the form"):
        parse_ref(text)


# --- user models -------------------------------------------------------------------------

@pytest.fixture
def user_modules(tmp_path, monkeypatch):
    (tmp_path / "mcap_raises_on_import.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "mcap_raises_on_build.py").write_text(
        "def make(width=3):\n    raise ValueError(f'bad width {width}')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("spec,needle", [
    ("mcap_raises_on_import:make", "RuntimeError: boom at import"),
    ("mcap_raises_on_build:make", "bad width 3"),
    ("mcap_raises_on_build:make:depth=4", "does not accept the parameters depth=4"),
    ("mcap_no_such_module_xyz:make", "cannot import"),
])
def test_user_models_that_fail_are_mcap_errors(user_modules, spec, needle):
    from mcap.models import build_model, trusted
    with pytest.raises(McapError, match=needle):
        build_model(trusted(spec), device="meta")


@pytest.mark.integration
def test_a_user_module_in_the_callers_folder_is_found_by_the_workers(tmp_path, monkeypatch):
    from mcap.core.types import Setup
    from mcap.models import trusted
    from mcap.runner import open_runner
    (tmp_path / "mcap_cwd_model_xyz.py").write_text(
        "import torch\nfrom torch import nn\n"
        "def make():\n"
        "    seq = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])\n"
        "    return seq, lambda b, seed=0: (torch.randn(b, 8), torch.randn(b, 8)), nn.functional.mse_loss\n")
    monkeypatch.chdir(tmp_path)
    with open_runner(trusted("mcap_cwd_model_xyz:make"), Setup(stages=2, batch_size=4, chunks=2),
                     timeout=120) as r:
        assert r.model_info.num_layers == 4
        assert r.measure((2, 2)).status == "ok"


@pytest.mark.app
def test_explained_page_with_more_chunks_than_its_slider(tmp_path, monkeypatch, tmp_store):
    from streamlit.testing.v1 import AppTest
    from tests.conftest import warm_orders
    warm_orders()
    d = json.loads(PROFILE.read_text())
    d["setup"]["chunks"] = 64
    data = tmp_path / "data"
    data.mkdir()
    (data / "many.profile.json").write_text(json.dumps(d))
    monkeypatch.setenv("MCAP_DATA_DIR", str(data))
    at = AppTest.from_file(str(DATA.parent / "app.py"), default_timeout=60)
    at.query_params["profile"] = "bundled:many.profile.json"
    at.run()
    at.switch_page("pages/explained.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.integration
def test_the_dashboards_timing_child_is_started_again_after_it_dies():
    """The dashboard times models in a child process (never in the server); a child killed
    (out of memory, say) is an error for that call and a fresh child for the next."""
    import os
    from mcap.app import timing as tb
    spec = "gpt:layers=4,hidden=16,heads=2,vocab=10,seq=4"
    first = tb.time_balance_isolated(spec, 2, 2, timeout=0.05)
    assert tb.CHILD.proc.pid != os.getpid() and sum(first) == 6
    tb.CHILD.proc.kill()
    tb.CHILD.proc.wait()
    again = tb.time_balance_isolated(spec, 3, 2, timeout=0.05)
    assert len(again) == 3 and sum(again) == 6
