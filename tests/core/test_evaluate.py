"""evaluate: error distribution and where each method's pick lands (issue 6).

Pure unit tests on hand-built profiles and sweeps, plus one integration test that makes a
tiny real profile and full sweep with the real CLI and evaluates them with the real CLI.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mcap.io import jsonio
from mcap.cli.main import main
from mcap.core.errors import McapError
from mcap.core.evaluate import (MethodPick, PointError, evaluate, place, pure_picks, summarise)
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Recommendation, Run, Setup, Sweep
from tests.conftest import REPO

MODEL = ModelInfo("toy:layers=4", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(4)))
SETUP = Setup(stages=2, batch_size=8, chunks=2)
# Listing 1.1 with these statistics: stage a..b = iso[a] + sum(added[a+1..b]).
STATS = LayerStats(mem_isolated=(100, 200, 300, 400), mem_added=(None, 50, 60, 70))
PROFILE = Profile(MODEL, SETUP, STATS)
# Predicted per-stage peaks: (1,3): 100 | 200+60+70=330 -> 330
#                            (2,2): 150 | 300+70=370    -> 370
#                            (3,1): 210 | 400          -> 400


def ok(balance, peaks):
    return Run(balance, "ok", peaks, 1.0)


def sweep_of(*runs, setup=SETUP):
    return Sweep(MODEL, setup, tuple(runs))


def test_errors_are_relative_to_the_measured_peak_and_summarised():
    sw = sweep_of(ok((1, 3), (100, 300)),   # predicted 330: +10%
                  ok((2, 2), (150, 370)),   # exact
                  ok((3, 1), (210, 500)))   # predicted 400: -20%
    ev = evaluate(PROFILE, sw)
    errs = {p.balance: p.error for p in ev.points}
    assert errs == pytest.approx({(1, 3): 0.1, (2, 2): 0.0, (3, 1): -0.2})
    e = ev.errors
    assert (e.count, e.median, e.max) == (3, pytest.approx(0.1), pytest.approx(0.2))
    assert e.p90 == pytest.approx(0.18)  # linear interpolation between 0.1 and 0.2
    assert e.within_goal == pytest.approx(1 / 3) and e.within_paper == pytest.approx(2 / 3)
    assert e.under == 1
    assert ev.best_balance == (1, 3) and ev.best_peak == 300


def test_oom_and_failed_runs_are_not_in_the_errors_and_rank_last():
    sw = sweep_of(ok((1, 3), (100, 300)), Run((2, 2), "oom", None, 1.0, error="cap"),
                  Run((3, 1), "failed", None, 1.0, error="boom"))
    ev = evaluate(PROFILE, sw, [Recommendation("exact", (2, 2), (150, 370), 0.0, 1)])
    assert ev.ok == 1 and ev.runs == 3 and ev.errors.count == 1
    pick = ev.picks[0]
    assert pick.measured_peak is None and pick.rank is None and pick.note == "oom in the sweep"
    assert pick.predicted_peak == 370


def test_rank_counts_strictly_lower_peaks_and_ratio_is_to_the_best():
    runs = [ok((1, 3), (100, 300)), ok((2, 2), (150, 300)), ok((3, 1), (210, 450))]
    assert place("a", (2, 2), 370, runs) == MethodPick("a", (2, 2), 370, 300, 1, 1.0)
    assert place("b", (3, 1), 400, runs) == MethodPick("b", (3, 1), 400, 450, 3, 1.5)
    missing = place("c", (1, 3), 330, runs[1:])
    assert (missing.measured_peak, missing.rank, missing.note) == (None, None, "not measured")


def test_unavailable_methods_are_reported_with_the_reason_in_method_order():
    sw = sweep_of(ok((1, 3), (100, 330)), ok((2, 2), (150, 370)), ok((3, 1), (210, 400)))
    picks = pure_picks(PROFILE, 2, methods=("uniform", "exact"))
    ev = evaluate(PROFILE, sw, picks, unavailable=[("time", "no torch here")])
    assert [m.method for m in ev.picks] == ["exact", "time", "uniform"]
    exact, time_, uniform = ev.picks
    assert exact.balance == (1, 3) and exact.rank == 1 and exact.ratio == 1.0
    assert time_.balance is None and time_.note == "no torch here"
    assert uniform.balance == (2, 2) and uniform.rank == 2
    assert uniform.ratio == pytest.approx(370 / 330)


def test_every_pure_method_finds_the_optimum_of_a_small_space():
    picks = pure_picks(PROFILE, 2, bo_iterations=12)
    assert [p.method for p in picks] == ["exact", "bf", "bo", "uniform", "params", "type", "titan",
                                         "megatron"]
    assert {p.balance for p in picks[:3]} == {(1, 3)}


def test_a_profile_of_another_model_or_setup_is_refused_naming_the_values():
    sw = sweep_of(ok((1, 3), (100, 300)), setup=Setup(stages=2, batch_size=16, chunks=2))
    with pytest.raises(McapError, match=r"batch_size 8 vs 16"):
        evaluate(PROFILE, sw)
    other = Sweep(ModelInfo("toy:layers=5", MODEL.layers + (Layer("l4", 1),)), SETUP, ())
    with pytest.raises(McapError, match=r"4 layers but the sweep's 'toy:layers=5' has 5"):
        evaluate(PROFILE, other)
    # A capacity is allowed to differ: it only turns runs into oom records.
    capped = sweep_of(ok((1, 3), (100, 300)), setup=Setup(stages=2, batch_size=8, chunks=2,
                                                            capacity_bytes=10 ** 6))
    assert evaluate(PROFILE, capped).ok == 1


def test_a_sweep_without_ok_runs_says_what_it_has():
    sw = sweep_of(Run((2, 2), "oom", None, 1.0), Run((1, 3), "failed", None, 1.0))
    with pytest.raises(McapError, match=r"no ok run \(2 runs: 1 failed, 1 oom\)"):
        evaluate(PROFILE, sw)


def test_summarise_refuses_nothing_to_summarise():
    with pytest.raises(McapError, match="no ok run"):
        summarise([], "paper")
    assert summarise([PointError((1, 3), 200, 100)], "paper").max == 0.5


def test_cli_evaluate_json_and_table(tmp_path, capsys):
    p, s = tmp_path / "p.json", tmp_path / "s.json"
    jsonio.save(PROFILE, p)
    jsonio.save(sweep_of(ok((1, 3), (100, 300)), ok((2, 2), (150, 370)), ok((3, 1), (210, 500))), s)
    assert main(["evaluate", "--profile", str(p), "--sweep", str(s), "--json", "--no-time",
                 "--bo-iterations", "12"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["error"]["count"] == 3 and out["error"]["max"] == pytest.approx(0.2)
    by = {m["method"]: m for m in out["methods"]}
    assert by["exact"]["balance"] == [1, 3] and by["exact"]["rank"] == 1
    assert by["time"]["note"] == "skipped (--no-time)"
    assert main(["evaluate", "--profile", str(p), "--sweep", str(s), "--no-time",
                 "--bo-iterations", "12"]) == 0
    table = capsys.readouterr().out
    assert "median 10.00%" in table and "within 14%: 66.67%" in table


def test_cli_bad_predictor_and_missing_file_exit_2(tmp_path):
    p = tmp_path / "p.json"
    jsonio.save(PROFILE, p)
    bad = subprocess.run([sys.executable, "-m", "mcap", "evaluate", "--profile", str(p),
                          "--sweep", str(tmp_path / "none.json")], capture_output=True, text=True)
    assert bad.returncode == 2 and "none.json" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "mcap", "evaluate", "--profile", str(p),
                          "--sweep", str(p), "--predictor", "nope"], capture_output=True, text=True)
    assert bad.returncode == 2 and "nope" in bad.stderr


# --- integration: tiny real data made with the real CLI ---------------------------------

TINY = ["--model", "gpt:layers=3,hidden=32,heads=2,vocab=128,seq=16", "--stages", "3",
        "--batch-size", "8", "--chunks", "2", "--timeout", "60"]


def _main(*argv) -> tuple[int, str, str]:
    """``python -m mcap ARGV`` in this process: (exit code, stdout, stderr). A child per
    command imported torch again (about 3 CPU s) before doing the same work."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def tiny_real(tmp_path_factory):
    """A real profile and the full sweep (all 6 partitionings of 5 layers on 3 stages)."""
    d = tmp_path_factory.mktemp("tiny")
    store = ["--store", str(d / "s.sqlite")]
    for cmd, out in (("profile", d / "p.json"), ("sweep", d / "s.json")):
        code, _, err = _main(cmd, *TINY, *store, "--out", out)
        assert code == 0, err[-2000:]
    return d / "p.json", d / "s.json"


@pytest.mark.integration
def test_evaluate_a_real_profile_against_its_full_real_sweep(tiny_real):
    p, s = tiny_real
    code, stdout, err = _main("evaluate", "--profile", p, "--sweep", s, "--json",
                              "--bo-iterations", "12")
    assert code == 0, err
    out = json.loads(stdout)
    assert out["runs"] == out["ok"] == out["error"]["count"] == 6
    by = {m["method"]: m for m in out["methods"]}
    assert set(by) == {"exact", "bf", "bo", "time", "uniform", "params", "type", "titan", "megatron"}
    sweep = jsonio.load_sweep(s)
    peaks = {r.balance: r.peak for r in sweep.runs}
    for m in by.values():  # the full sweep measured every pick
        bal = tuple(m["balance"])
        assert m["measured_peak"] == peaks[bal]
        assert m["rank"] == 1 + sum(p < peaks[bal] for p in peaks.values())
        assert m["ratio"] == pytest.approx(peaks[bal] / min(peaks.values()))
    # With every prediction within e, the lowest predicted partitioning can be at most
    # (1+e)/(1-e) above the measured best: the pick's quality follows from the error.
    e = out["error"]["max"]
    assert by["exact"]["ratio"] <= (1 + e) / (1 - e) + 1e-12
    for method in ("exact", "bf"):
        assert by[method]["balance"] == by["exact"]["balance"]


# --- a profile measured on a device this machine lacks (issue 30) ---------------------------

H100 = ("data/vgg11-224-b1104-h100x4.profile.json", "data/vgg11-224-b1104-h100x4.sweep.json")


def _has_cuda() -> bool:
    import torch
    return torch.cuda.is_available()


def _evaluate_h100(*extra):
    p, s = H100
    return _main("evaluate", "--profile", REPO / p, "--sweep", REPO / s, *extra)


@pytest.mark.integration
@pytest.mark.skipif(_has_cuda(), reason="this machine has CUDA: the time baseline runs there")
def test_evaluate_of_the_bundled_cuda_pair_leaves_time_out_here_and_says_why():
    """A newcomer's first command on a CPU machine raised 'Torch not compiled with CUDA
    enabled' from the time baseline. Every other baseline runs; time is left out, named
    with its reason, and the exit status is 0 (table and --json)."""
    code, out, err = _evaluate_h100()
    assert code == 0 and "Traceback" not in err, err[-2000:]
    assert "exact    3-3-5-19" in out
    assert "time: left out: the profile was measured on cuda; this machine has no CUDA " \
           "device, so torchgpipe's balance_by_time cannot time it here" in out
    code, out, err = _evaluate_h100("--json")
    assert code == 0, err[-2000:]
    by = {m["method"]: m for m in json.loads(out)["methods"]}
    assert by["time"]["balance"] is None and "no CUDA device" in by["time"]["note"]
    assert all(by[m]["balance"] for m in ("exact", "bf", "bo", "uniform", "params"))
    # recommend --method time itself: exit 2 naming the reason, no traceback
    code, _, err = _main("recommend", "--profile", REPO / H100[0], "--stages", "4", "--method",
                         "time")
    assert code == 2 and "Traceback" not in err
    assert "this machine has no CUDA device" in err


@pytest.mark.cuda
@pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA device")
def test_evaluate_of_the_bundled_cuda_pair_times_it_on_the_gpu():
    """Where the profile's device is, time runs: balance_by_time on the GPU."""
    code, out, err = _evaluate_h100("--json")
    assert code == 0, err[-2000:]
    by = {m["method"]: m for m in json.loads(out)["methods"]}
    assert sum(by["time"]["balance"]) == 30 and len(by["time"]["balance"]) == 4, by["time"]
