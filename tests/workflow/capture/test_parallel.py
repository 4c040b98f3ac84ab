"""Profiling for hybrid stages (CAPTURE III-A1, issue 15): ``profile --parallel dp,tp``
runs the profiling partitionings over sub-meshes of k devices on engine hybrid and keeps
per-device statistics per (kind, degree) in ``Profile.variants``."""
from __future__ import annotations

import pytest

from mcap.core.errors import McapError
from mcap.core.capture.plan import parse_plan
from mcap.core.types import Setup
from mcap.workflow.capture.parallel import check_parallel, parse_kinds, variant_degrees, variant_plans

GPT = "gpt:layers=4,hidden=32,heads=2,vocab=64,seq=8"  # 6 layers


def test_degrees_the_devices_allow():
    assert variant_degrees(("dp", "tp"), 4) == [("dp", 2), ("tp", 2)]
    assert variant_degrees(("dp", "tp"), 8) == [("dp", 2), ("dp", 4), ("tp", 2), ("tp", 4)]
    assert variant_degrees(("tp",), 3) == []
    assert parse_kinds("tp, dp,tp") == ("tp", "dp")
    with pytest.raises(McapError, match="'dp,pp'"):
        parse_kinds("dp,pp")
    with pytest.raises(McapError, match="needs at least 4 devices .* --stages is 3"):
        check_parallel(("dp",), Setup(stages=3, batch_size=8, chunks=2, engine="hybrid"))
    with pytest.raises(McapError, match="micro-batch size 3 .* degree 2"):
        check_parallel(("dp",), Setup(stages=4, batch_size=6, chunks=2, engine="hybrid"))
    # pipeline-only statistics from another runtime than the dp/tp ones: refused
    with pytest.raises(McapError, match="--engine is 'pipelining'.*--engine hybrid"):
        check_parallel(("dp",), Setup(stages=4, batch_size=8, chunks=2))


def test_profile_parallel_runs_on_engine_hybrid_or_is_refused(tmp_path, capsys):
    from mcap.cli.main import main
    argv = ["profile", "--model", GPT, "--stages", "4", "--batch-size", "8", "--chunks", "2",
            "--parallel", "dp,tp", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(tmp_path / "p.json")]
    assert main(argv + ["--engine", "pipelining"]) == 2
    err = capsys.readouterr().err
    assert "--engine is 'pipelining'" in err and "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


def test_variant_plans_are_the_pipeline_plans_on_sub_meshes():
    plans = variant_plans(6, 2, "tp", 2, "mcap")
    assert plans and all(p.devices == 4 and len(p.stages) == 2 for p in plans)
    assert all(s.parallel == "tp" and s.degree == 2 for p in plans for s in p.stages)
    assert all(sum(p.balance) == 6 for p in plans)


@pytest.mark.integration
def test_profile_keeps_tensor_parallel_statistics(tmp_path):
    from mcap.store import Store
    from mcap.workflow.profiling import ProfileRequest, profile

    setup = Setup(stages=4, batch_size=8, chunks=2, engine="hybrid")
    with Store(tmp_path / "s.sqlite") as store:
        result = profile(ProfileRequest(GPT, setup, tmp_path / "p.json", parallel=("tp",)), store=store)
        (v,) = result.profile.variants
        assert (v.parallel, v.degree, v.batch_size) == ("tp", 2, 8)
        # 2 sub-meshes: the profiling plans, then the whole model on one sub-mesh (its
        # PM(0..L-1) gives the last layer's mem_added, which no 2-stage run measures)
        assert [r.balance for r in v.runs] == \
            [p.balance for p in variant_plans(6, 2, "tp", 2, "mcap")] + [(6,)]
        assert all(r.status == "ok" and len(r.peaks) == 2 * len(r.balance) for r in v.runs)
        assert all(x > 0 for x in v.stats.mem_isolated)
        # a tensor-parallel block holds about half the weights of a pipeline one
        assert v.stats.mem_isolated[2] < 0.8 * result.profile.stats.mem_isolated[2]
        again = store.load_profile(result.profile_id)
        assert again.variants[0].stats == v.stats
        # resumed: the runs are in the store, nothing is measured again
        before = len(store.run_records())
        second = profile(ProfileRequest(GPT, setup, parallel=("tp",)), store=store)
        assert second.profile.variants[0].stats == v.stats
        assert len(store.run_records()) == before
    # Predicted == measured on plans the profile did not run: its pp stages and its tp2
    # stage both come from engine hybrid, the runtime that runs the plan (a pp profile from
    # engine pipelining read 13-24% high here: bench/log/2026-11-24-hybrid-plans-measured.md).
    from mcap.core.capture.predict import HybridCosts
    from mcap.runner import open_runner
    hc = HybridCosts(result.profile)
    with open_runner(GPT, setup, timeout=120) as runner:
        for text in ("2,1,1,2", "2,1,3:tp2"):
            measured = runner.measure_plan(text).peaks
            predicted = hc.peaks(parse_plan(text))
            assert all(abs(p - m) <= 0.03 * m for p, m in zip(predicted, measured)), \
                (text, predicted, measured)


def test_parallel_with_press_is_refused_naming_why(tmp_path, capsys):
    from mcap.cli.main import main
    argv = ["profile", "--model", GPT, "--stages", "4", "--batch-size", "8", "--chunks", "2",
            "--parallel", "dp", "--press", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(tmp_path / "p.json")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "an MPress plan applies to a --balance, never to a hybrid --plan" in err
    assert "Traceback" not in err and not (tmp_path / "p.json").exists()


@pytest.mark.integration
def test_parallel_profiles_merged_layers_and_plans_map_back(tmp_path, capsys):
    """``profile --parallel dp,tp --merge-to 5`` (CAPTURE III-A3 with III-A1): the dp/tp
    profiling partitionings are those of the 5 merged layers (fewer runs than over the 6
    real ones), measured and stored as real-layer plans; predictions and ``recommend
    --mesh`` take and print plans over the real layers."""
    import json

    from mcap.cli.main import main
    from mcap.core.capture import merging
    from mcap.core.capture.predict import HybridCosts
    from mcap.core.profiling.schedule import profiling_plan
    from mcap.io import jsonio
    from mcap.runner import open_runner
    from mcap.store import Store

    out, db = tmp_path / "m.json", tmp_path / "s.sqlite"
    assert main(["profile", "--model", GPT, "--stages", "4", "--batch-size", "8", "--chunks",
                 "2", "--parallel", "dp,tp", "--merge-to", "5", "--store", str(db),
                 "--out", str(out)]) == 0
    prof = jsonio.load_profile(out)
    sizes = merging.sizes_of(prof)
    assert prof.model.num_layers == 5 and sum(sizes) == 6
    assert [(v.parallel, v.degree) for v in prof.variants] == [("dp", 2), ("tp", 2)]
    for v in prof.variants:
        # the merged layers' partitionings over 2 sub-meshes, then the whole model
        assert [r.balance for r in v.runs] == \
            [p.balance for p in variant_plans(5, 2, v.parallel, 2, "mcap")] + [(5,)]
        assert len(v.runs) < len(profiling_plan(6, 2, "mcap").runs) + 1  # what merging saves
        assert v.stats.num_layers == 5 and all(r.status == "ok" for r in v.runs)
    with Store(db) as store:  # stored as the real-layer plans they ran
        hybrid = [s for s in store.list_studies() if s.setup.engine.startswith("hybrid:")]
        assert hybrid and all(sum(r.balance) == 6 for s in hybrid for r in store.runs(s.id))

    capsys.readouterr()
    assert main(["recommend", "--profile", str(out), "--mesh", "1x4", "--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert sum(s["layers"] for s in rec["plan"]) == 6  # real layers
    hc = HybridCosts(prof)
    assert rec["predicted_peaks"] == list(hc.peaks(parse_plan(rec["plan_text"])))

    # Predicted vs measured on plans the profile did not run, written over the real layers
    setup = Setup(stages=4, batch_size=8, chunks=2, engine="hybrid")
    merged = (parse_plan("2,2:dp2,1"), parse_plan("2:tp2,3:dp2"))
    with open_runner(GPT, setup, timeout=120) as runner:
        for plan in (merging.expand_plan(p, sizes) for p in merged):
            _close(plan, hc.peaks(plan), runner.measure_plan(plan).peaks, pp=0.05)


def _close(plan, predicted, measured, pp: float) -> None:
    """Per device: dp within 5%, pp within ``pp``, tp within the issue's 10% for hybrid
    plans (a tp device's peak varies by up to 4% between identical runs on CPU: gloo's
    collective buffers, measured on this GPT at batch sizes 16-64)."""
    kinds = [s.parallel for s in plan.stages for _ in range(s.degree)]
    for kind, p, m in zip(kinds, predicted, measured):
        bound = {"pp": pp, "dp": 0.05, "tp": 0.10}[kind]
        assert abs(p - m) <= bound * m, (plan.text, kind, predicted, measured)


def test_parallel_at_profiling_batch_sizes_is_checked_before_any_run(tmp_path, capsys,
                                                                      monkeypatch):
    """--parallel with --profile-batch-sizes: a size whose micro-batch a dp2 stage cannot
    split is refused before any process starts, naming the size."""
    from mcap.cli.main import main
    from mcap.runner.pool import WorkerPool
    started = []
    monkeypatch.setattr(WorkerPool, "start", lambda self: started.append(self))
    assert main(["profile", "--model", GPT, "--stages", "4", "--batch-size", "16", "--chunks",
                 "2", "--parallel", "dp", "--profile-batch-sizes", "2,8", "--store",
                 str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "profiling batch size 2:" in err and "micro-batch size 1" in err, err
    assert started == [] and not (tmp_path / "p.json").exists()


@pytest.mark.integration
def test_parallel_with_batch_sizes_predicts_dp_tp_stages_on_the_line(tmp_path, capsys):
    """``profile --parallel dp,tp --profile-batch-sizes 16,32`` with target 64 (III-A2/B2
    with III-A1): dp2 and tp2 statistics at both sizes; a dp/tp stage's peak at 64 is the
    line through its peaks at 16 and 32, per (kind, degree), and matches the measured one."""
    import json

    from mcap.cli.main import main
    from mcap.core.capture import batchscale
    from mcap.core.capture.plan import batch_line
    from mcap.core.capture.predict import HybridCosts
    from mcap.io import jsonio
    from mcap.runner import open_runner

    out, db = tmp_path / "c.json", tmp_path / "s.sqlite"
    assert main(["profile", "--model", GPT, "--stages", "4", "--batch-size", "64", "--chunks",
                 "2", "--parallel", "dp,tp", "--profile-batch-sizes", "16,32", "--store",
                 str(db), "--out", str(out)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    assert "dp2 at batch size 16: 6 runs" in printed and "tp2 at batch size 32: 6 runs" in printed
    # Issue 26, item 15: the progress bar counts the runs the summary counts (it stopped at
    # 5/5 under "6 runs": the whole-model run was not on it).
    import re
    counts = re.findall(r"profile (?:dp|tp)2 \[[#.]*\] (\d+)/(\d+)", captured.err)
    assert counts and {total for _, total in counts} == {"6"}, captured.err
    assert sum(done == "6" for done, _ in counts) == 4  # dp2 and tp2 at 16 and at 32
    prof = jsonio.load_profile(out)
    assert batchscale.extrapolated(prof) and prof.setup.batch_size == 64
    assert sorted(v.key for v in prof.variants) == sorted(
        (b, k, d) for b in (16, 32) for k, d in (("pp", 1), ("dp", 2), ("tp", 2)))

    hc = HybridCosts(prof)
    plans = ("2,3:dp2,1", "1,4:tp2,1")
    for text in plans:  # the line through the two sizes' own predictions, per stage
        plan = parse_plan(text)
        at = {b: HybridCosts(prof, batch_size=b).peaks(plan) for b in (16, 32)}
        assert hc.peaks(plan) == tuple(round(batch_line(a, 16, b, 32, 64))
                                       for a, b in zip(at[16], at[32]))
    # Measured at 64: a pp stage within 10% (the embedding alone, 1,4:tp2,1's first stage,
    # is 8% low: its peak is not yet linear in micro-batches of 8 and 16 samples, the pp
    # line's own limit, bench/log/2026-11-23-capture-batch-scaling.md); dp and tp devices: _close.
    setup = Setup(stages=4, batch_size=64, chunks=2, engine="hybrid")
    with open_runner(GPT, setup, timeout=120) as runner:
        for text in plans:
            plan = parse_plan(text)
            _close(plan, hc.peaks(plan), runner.measure_plan(plan).peaks, pp=0.10)
    assert main(["predict", "--profile", str(out), "--plan", plans[0], "--batch-size", "128",
                 "--json"]) == 0
    at128 = json.loads(capsys.readouterr().out)["predicted_peaks"]
    assert list(HybridCosts(prof, batch_size=128).peaks(parse_plan(plans[0]))) == at128
    assert at128[1] > hc.peaks(parse_plan(plans[0]))[1]  # the dp stage grows with the batch


@pytest.mark.integration
def test_profile_summary_counts_the_dp_tp_runs(tmp_path, capsys):
    """``profile --parallel dp,tp``'s summary line counted only the pipeline-only runs
    ("3 measured now, 0 reused"), not the 12 dp/tp runs it measured (CAPTURE, issue 15):
    each count now holds them and says how many of it they were, measured now and, run
    again, found in the store."""
    from mcap.cli.main import main
    from mcap.workflow.profiling import ProfileResult

    argv = ["profile", "--model", GPT, "--stages", "4", "--batch-size", "8", "--chunks", "2",
            "--parallel", "dp,tp", "--store", str(tmp_path / "s.sqlite"),
            "--out", str(tmp_path / "p.json")]
    from mcap.core.profiling.schedule import profiling_plan
    pp = len(profiling_plan(6, 4, "mcap").runs)  # the pipeline-only profiling runs: 3
    dp_tp = 2 * (len(variant_plans(6, 2, "dp", 2, "mcap")) + 1)  # + the whole model each
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert (f"profile: {pp + dp_tp} runs (of them {dp_tp} dp/tp; {pp + dp_tp} ok, 0 oom, "
            f"0 failed); {pp + dp_tp} measured now (of them {dp_tp} dp/tp), 0 reused from "
            f"the store; ") in printed, printed
    assert main(argv) == 0  # again: every run is found in the store
    printed = capsys.readouterr().out
    assert (f"; 0 measured now, {pp + dp_tp} reused from the store (of them {dp_tp} dp/tp); "
            in printed), printed
    # a result wrapping the same profile again (capture.profile_merged does) counts them once
    from mcap.store import Store
    from mcap.workflow.profiling import ProfileRequest, Tally, profile
    with Store(tmp_path / "s.sqlite") as store:
        setup = Setup(stages=4, batch_size=8, chunks=2, engine="hybrid")
        result = profile(ProfileRequest(GPT, setup, parallel=("dp", "tp")), store=store)
    assert (result.tally.reused, result.tally.parallel_reused) == (pp + dp_tp, dp_tp)
    again = ProfileResult(result.profile, result.profile_id, Tally.combined([result.tally], 1.0))
    assert again.tally.reused == pp + dp_tp and len(again.tally.parallel_runs) == dp_tp
