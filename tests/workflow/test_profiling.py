"""profile / sweep orchestration, the parts that need no stage processes: the sweep's
balances, the oom fallback's choices (real mcap.core.profiling.schedule.replan), the missing-statistics
message, byte sizes and CLI input errors (exit 2)."""
from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from mcap.cli.args import parse_bytes
from mcap.core.errors import McapError
from mcap.core.profiling.schedule import profiling_plan
from mcap.workflow.profiling import Tally, _fallback, _missing_message, model_info, summary, sweep_balances
from mcap.core.profiling.stats import extract
from mcap.core.types import Run

GPT = "gpt:layers=4,hidden=16,heads=2,vocab=32,seq=4"  # 6 layers


def test_sweep_balances_all_or_seeded_sample():
    every = sweep_balances(30, 4, None, 0)
    assert len(every) == 3654 == len(set(every))  # the paper's VGG11 space (4.2)
    assert all(sum(b) == 30 and min(b) >= 1 for b in every)
    sample = sweep_balances(30, 4, 25, 7)
    assert sample == sweep_balances(30, 4, 25, 7) != sweep_balances(30, 4, 25, 8)
    assert len(set(sample)) == 25 and set(sample) <= set(every)
    with pytest.raises(McapError, match="--sample must be >= 1, got 0"):
        sweep_balances(30, 4, 0, 0)


def test_a_zero_bubble_sweep_lists_only_what_torch_can_run():
    """Under a schedule that splits the backward no chunk may end at a view (VGG11's
    flatten, layer 22): such runs only failed in torch (25 of a 150 sample); the sweep now
    leaves them out and says how many. Other schedules list every partitioning."""
    import io

    from mcap.core.partition import windows
    from mcap.core.types import Setup
    from mcap.workflow.sweeping import runnable_balances
    spec = "vgg11:image_size=32,classes=10,hidden=128"
    zb = Setup(stages=2, batch_size=8, chunks=4, schedule="zbv", virtual_stages=2,
               checkpoint="never")
    said = io.StringIO()
    every = runnable_balances(model_info(spec, zb), zb, None, 0, said)
    assert len(every) == 3654 - 378 == len(set(every))
    assert not [b for b in every if any(w[1] == 22 for w in windows(b)[:-1])]
    assert "378 of the 3,654 partitionings left out" in said.getvalue()
    assert "layer 22" in said.getvalue()
    sample = runnable_balances(model_info(spec, zb), zb, 150, 1, io.StringIO())
    assert len(set(sample)) == 150 and set(sample) <= set(every)
    il = Setup(stages=2, batch_size=8, chunks=4, schedule="interleaved-1f1b",
               virtual_stages=2, checkpoint="never")
    quiet = io.StringIO()
    assert runnable_balances(model_info(spec, il), il, 150, 1, quiet) == \
        sweep_balances(30, 4, 150, 1)
    assert quiet.getvalue() == ""


def _fake_peaks(balance):
    """Peaks from a consistent additive model (stats are then exactly recoverable)."""
    out, start = [], 0
    for n in balance:
        out.append(1000 * (start + 1) + 10 * sum(range(start, start + n)))
        start += n
    return tuple(out)


def test_fallback_replaces_an_oom_profiling_run_until_statistics_are_complete():
    plan = profiling_plan(6, 3).runs
    oom = plan[0]
    runs = [Run(b, "oom", None, 1.0, error="over capacity") if b == oom
            else Run(b, "ok", _fake_peaks(b), 1.0) for b in plan]
    with pytest.raises(McapError):
        extract(runs, 6)
    extra = _fallback(6, 3, runs)
    assert extra and oom not in extra and not set(extra) & set(plan)
    runs += [Run(b, "ok", _fake_peaks(b), 1.0) for b in extra]
    stats = extract(runs, 6)  # complete now
    assert _fallback(6, 3, runs) == [] and stats.num_layers == 6


def test_missing_message_names_layers_and_keeps_runs():
    info = model_info(GPT)
    runs = [Run(b, "oom", None, 1.0) for b in profiling_plan(6, 3).runs]
    text = _missing_message(info, runs, "no ok run")
    assert "still missing mem_isolated for layers 0, 1, 2, 3, 4, 5" in text
    assert "0 (embed)" in text and "5 (head)" in text
    assert f"{len(runs)} run(s) did not finish ok" in text and "kept in the store" in text


def test_summary_line():
    runs = (Run((1, 2), "ok", (5, 6), 1.0), Run((2, 1), "oom", None, 1.0))
    assert summary("profile", Tally(1, 1, 3.25, runs, ((2, 1),)), None, 4) == (
        "profile: 2 runs (1 ok, 1 oom, 0 failed, 1 fallback); 1 measured now, 1 reused "
        "from the store; 3.2 s (store profile id 4)")


@pytest.mark.parametrize("text, value", [("123456", 123456), ("512MiB", 512 * 2**20),
                                         ("1.5GB", 1_500_000_000), ("2 gib", 2 * 2**30)])
def test_parse_bytes(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["lots", "12XB", "0", "-5MiB"])
def test_parse_bytes_refuses(text):
    with pytest.raises(argparse.ArgumentTypeError, match="capacity"):
        parse_bytes(text)


@pytest.mark.integration
@pytest.mark.parametrize("argv, message", [
    (["profile", "--model", "resnet50", "--stages", "2"], "unknown model 'resnet50'"),
    (["sweep", "--model", "vgg11:depth=3", "--stages", "2"], "no parameter 'depth'"),
    (["profile", "--model", GPT, "--stages", "9"], "--stages 9: the model"),
    (["profile", "--model", GPT, "--stages", "2", "--capacity", "lots"], "capacity 'lots'"),
])
def test_cli_bad_input_exits_2_with_one_line(tmp_path, argv, message):
    out = subprocess.run([sys.executable, "-m", "mcap", *argv, "--store", str(tmp_path / "s.sqlite"),
                          "--out", str(tmp_path / "o.json")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr


def test_fallback_rounds_complete_vgg_sized_plan_when_long_stages_oom():
    """30 layers on 4 stages, a device that fits at most 12 layers: the plan's runs with a
    longer stage are oom; fallback rounds (replan, then the greedy search) must complete
    the statistics, and the greedy never proposes a stage longer than any ok window."""
    def run(b):
        return Run(b, "ok", _fake_peaks(b), 1.0) if max(b) <= 12 else Run(b, "oom", None, 1.0)

    runs = [run(b) for b in profiling_plan(30, 4).runs]
    assert any(r.status == "oom" for r in runs)
    rounds = 0
    while True:
        extra = _fallback(30, 4, runs)
        if not extra:
            break
        assert not {b for b in extra} & {r.balance for r in runs}  # nothing repeated
        runs += [run(b) for b in extra]
        rounds += 1
        assert rounds < 10
    stats = extract(runs, 30)
    assert stats.num_layers == 30
    plan_size = len(profiling_plan(30, 4).runs)
    assert all(r.status == "ok" for r in runs[plan_size:])  # no fallback run was too long


def _oom(balance, stage):
    from mcap.core.partition import Partitioning
    a, z = Partitioning(balance).bounds()[stage]
    return Run(balance, "oom", None, 1.0,
               error=f"stage {stage} (layers {a}..{z}): mcap memtrack: out of memory: "
                     f"allocating 589824 bytes with 41539664 bytes held would exceed the "
                     f"capacity of 41943040 bytes")


def test_oom_windows_are_read_from_the_runners_errors():
    from mcap.core.profiling.stats import doomed, over_capacity_windows
    runs = [_oom((4, 1, 4, 3), 3), _oom((8, 1, 2, 1), 2),
            Run((2, 2, 2, 6), "failed", None, 1.0, error="stage 3 (layers 6..11): boom"),
            Run((1, 1, 1, 9), "oom", None, 1.0, error=None)]
    assert over_capacity_windows(runs) == {(9, 11), (9, 10)}
    assert doomed((8, 10), {(9, 10)}) and not doomed((10, 11), {(9, 10)})


def test_fallback_never_retries_a_stage_that_ran_out_of_memory():
    """AmoebaNet-D(6, 96) under 40 MiB (real errors of its profiling plan): cells 9 and 10
    do not fit on one stage, so no fallback holds them together, and the message says
    that their mem_added cannot be measured under this capacity."""
    from mcap.core.profiling.stats import doomed, stage_windows
    plan = [(1, 1, 5, 5), (2, 1, 5, 4), (3, 1, 4, 4), (4, 1, 4, 3), (5, 1, 3, 3),
            (6, 1, 3, 2), (8, 1, 2, 1), (9, 1, 1, 1)]
    stage = {(1, 1, 5, 5): 3, (2, 1, 5, 4): 3, (3, 1, 4, 4): 3, (4, 1, 4, 3): 3,
             (5, 1, 3, 3): 3, (6, 1, 3, 2): 2, (8, 1, 2, 1): 2, (9, 1, 1, 1): 0}
    runs = [_oom(b, stage[b]) for b in plan]
    runs.append(Run((7, 1, 2, 2), "ok", (25114752, 7884736, 36092608, 25743024), 1.0))
    bad = {(7, 11), (8, 11), (9, 11), (7, 9), (9, 10), (0, 8)}
    extra = _fallback(12, 4, runs)
    assert extra
    for b in extra:
        assert not any(doomed(w, bad) for w in stage_windows(b)), b
    info = model_info("amoebanet-d:layers=6,filters=16")
    text = _missing_message(info, runs, "")
    assert "layers 9 and 10 ran out of memory together on one stage" in text


def test_summary_line_counts_dp_tp_runs_in_each_count():
    """profile --parallel: the dp/tp runs are in the runs, measured and reused counts, each
    saying how many of it they were; without them the line reads as before."""
    runs = (Run((1, 2), "ok", (5, 6), 1.0),)
    dp_tp = (Run((1, 2), "ok", (5, 6), 1.0), Run((3,), "oom", None, 1.0))
    tally = Tally(2, 1, 3.25, runs, parallel_measured=1, parallel_reused=1, parallel_runs=dp_tp)
    assert summary("profile", tally, None, 4) == (
        "profile: 3 runs (of them 2 dp/tp; 2 ok, 1 oom, 0 failed); 2 measured now (of them "
        "1 dp/tp), 1 reused from the store (of them 1 dp/tp); 3.2 s (store profile id 4)")
