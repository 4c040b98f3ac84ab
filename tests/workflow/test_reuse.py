"""Stage-reuse sweeps (issue 13): the orchestration with a scripted measurer, then end to
end on the CPU with real stage processes: composed peaks equal direct measurements
exactly, an interrupted sweep resumes without repeating a run, oom stays oom."""
from __future__ import annotations

import io
import itertools
import os
import signal
import subprocess
import sys
import time

import pytest

from mcap.core.profiling.cover import Knowledge, distinct_keys, greedy_cover, stage_keys
from mcap.core.partition import enumerate_all
from mcap.core.types import Run, Setup
from mcap.io import jsonio
from mcap.store import Store
from mcap.workflow import reuse
from mcap.workflow.profiling import ProfileRequest, profile, sweep

# One xdist worker for the whole file: its module fixtures (sweeps killed and resumed)
# were made once in each worker when the tests sharing them were split.
pytestmark = pytest.mark.xdist_group("workflow-test_reuse")


def every(layers, stages):
    return [tuple(int(n) for n in row) for chunk in enumerate_all(layers, stages) for row in chunk]


# --- the orchestration, with a scripted measurer -------------------------------------

class Bar:
    def __init__(self):
        self.total = 0

    def grow(self, n):
        self.total += n


class Scripted:
    """Stands in for the Measurer: answers from a table of stage peaks, fails on request."""

    def __init__(self, schedule, fail=(), capacity=None):
        self.schedule, self.fail, self.capacity = schedule, set(fail), capacity
        self.bar, self.asked = Bar(), []

    def peak(self, key):
        if key[:2] == (2, 4):  # layers 2..4 in one stage: far more than any other stage
            return 10**6
        return 1000 * (key[0] + 1) + key[1] + 1

    def get(self, balance):
        self.asked.append(balance)
        if balance in self.fail:
            return Run(balance, "failed", None, 1.0, error="crashed")
        peaks = tuple(self.peak(k) for k in stage_keys(balance, self.schedule))
        if self.capacity is not None and max(peaks) > self.capacity:
            return Run(balance, "oom", None, 1.0, error="out of memory")
        return Run(balance, "ok", peaks, 1.0, samples_per_second=1.0)


def run_reusing(m, balances, schedule, stages):
    know = Knowledge(schedule, stages)
    cover = reuse.plan_cover(know, {}, balances, schedule)
    return cover, reuse.sweep_reusing(m, know, {}, cover, balances)


def test_failed_covering_run_leaves_its_partitionings_to_direct_measurement():
    balances = every(9, 4)
    first = greedy_cover(balances, "gpipe")

    def needing(pick):  # the other partitionings that hold a key only this pick covers
        only = set(stage_keys(pick, "gpipe")) - distinct_keys(
            [b for b in first if b != pick], "gpipe")
        return [b for b in balances if b != pick and only & set(stage_keys(b, "gpipe"))]

    bad = max(first, key=lambda p: len(needing(p)))
    assert needing(bad)
    m = Scripted("gpipe", fail={bad})
    cover, result = run_reusing(m, balances, "gpipe", 4)
    assert cover == first
    truth = Scripted("gpipe", fail={bad})
    for b, run in zip(balances, result.runs):
        expected = truth.get(b)
        assert (run.status, run.peaks) == (expected.status, expected.peaks), b
    assert result.runs[balances.index(bad)].status == "failed"  # its own record
    assert len(m.asked) == len(set(m.asked)) < len(balances)  # nothing twice
    assert result.direct == m.bar.total >= 1
    # A stage known only from the failed run is measured, not guessed: at least one
    # partitioning holding each such stage was measured directly.
    only = set(stage_keys(bad, "gpipe")) - distinct_keys([b for b in first if b != bad], "gpipe")
    for key in only:
        holders = [b for b in balances if key in stage_keys(b, "gpipe") and b != bad]
        assert not holders or any(b in m.asked for b in holders)
        for b in holders:
            assert b in m.asked or result.runs[balances.index(b)].composed


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_capacity_oom_is_composed_for_every_partitioning_holding_the_stage(schedule):
    balances = every(9, 4)
    probe = Scripted(schedule)
    m = Scripted(schedule, capacity=10**5)  # a stage of layers 2..4 does not fit
    cover, result = run_reusing(m, balances, schedule, 4)
    assert len(m.asked) == len(set(m.asked)) < len(balances)
    capped = Scripted(schedule, capacity=10**5)
    for b, run in zip(balances, result.runs):
        assert run.status == capped.get(b).status, b
        if run.status == "ok":
            assert run.peaks == probe.get(b).peaks
    assert any(r.composed and r.status == "oom" for r in result.runs)


# --- profile wiring: every stage known, so nothing is measured --------------------------

def test_profile_composes_runs_whose_every_stage_is_stored_and_starts_no_process(tmp_path):
    from mcap.core.profiling.schedule import profiling_plan
    from mcap.core.profiling.stats import extract
    from mcap.workflow.measuring import model_info

    spec, setup = "vgg11:image_size=32,hidden=64", Setup(stages=4, batch_size=8, chunks=2)
    from mcap.runner.machine import collect

    info = model_info(spec)
    store = Store(tmp_path / "s.sqlite")
    study = store.study(info, setup)
    here = collect(setup)  # runs of this machine only are reused (mcap.core.machine)
    scripted = Scripted("gpipe")
    plan = [tuple(b) for b in profiling_plan(info.num_layers, 4).runs]
    # Measured runs of other partitionings holding every stage they can (a sweep would
    # leave these); a plan run with a stage no other partitioning has is stored itself.
    others = [b for b in every(info.num_layers, 4) if b not in plan]
    for b in greedy_cover(others, "gpipe"):
        store.record_run(study, scripted.get(b), kind="sweep", machine=here)
    elsewhere = distinct_keys(others, "gpipe")
    alone = [b for b in plan if not set(stage_keys(b, "gpipe")) <= elsewhere]
    for b in alone:
        store.record_run(study, scripted.get(b), kind="profile", machine=here)
    # Another machine's run (here: none recorded) must not be reused nor composed from.
    store.record_run(study, Run(plan[-1], "ok", (1,) * 4, 0.1), kind="measure")
    result = profile(ProfileRequest(spec, setup, stream=io.StringIO()), store=store)
    made = [r for r in result.profile.runs if r.composed]
    assert result.tally.measured == 0 and result.tally.reused == len(alone)
    assert result.tally.composed == len(made) == len(plan) - len(alone) >= 1
    for r in result.profile.runs:
        assert r.peaks == scripted.get(r.balance).peaks
    assert result.profile.stats == extract(result.profile.runs, info.num_layers)
    stored = store.load_profile(result.profile_id)
    assert [r.composed for r in stored.runs] == [r.composed for r in result.profile.runs]


# --- end to end on the CPU -----------------------------------------------------------

MODEL = "vgg11:image_size=32,hidden=64"  # 30 distinct layers: a wrong stage shows
SETUP = Setup(stages=4, batch_size=8, chunks=2)
# The partitionings cutting only at these layers: 10, sharing stages (7 cover them all),
# a middle stage at index 1 in one and at index 2 in another.
CUTS = (4, 9, 15, 21, 26)
BALANCES = [(a, b - a, c - b, 30 - c) for a, b, c in itertools.combinations(CUTS, 3)]
SWEEP_CODE = ("import io, sys; from mcap.store import Store; from mcap.core.types import Setup; "
              "from mcap.workflow.profiling import sweep; "
              f"sweep({MODEL!r}, Setup(stages=4, batch_size=8, chunks=2), None, "
              "store=Store(sys.argv[1]), stream=io.StringIO(), balances=" + repr(BALANCES) + ")")


@pytest.fixture(scope="module")
def together():
    """The covering form of reuse is for stages that run together (--isolation pipeline);
    stages run alone measure each stage once (the tests at the end of this file)."""
    saved = os.environ.get("MCAP_ISOLATION")
    os.environ["MCAP_ISOLATION"] = "pipeline"
    yield
    if saved is None:
        os.environ.pop("MCAP_ISOLATION", None)
    else:
        os.environ["MCAP_ISOLATION"] = saved


@pytest.fixture(scope="module")
def resumed(tmp_path_factory, together):
    """A reusing sweep killed after two runs, then resumed."""
    tmp = tmp_path_factory.mktemp("reuse")
    db, out = tmp / "s.sqlite", tmp / "sweep.json"
    child = subprocess.Popen([sys.executable, "-c", SWEEP_CODE, str(db)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    store = Store(db)
    deadline = time.monotonic() + 120
    try:
        while len(store.run_records()) < 2 and time.monotonic() < deadline:
            assert child.poll() is None, "sweep ended before it was killed"
            time.sleep(0.05)
    finally:
        os.killpg(child.pid, signal.SIGKILL)  # the command and its stage processes
        child.wait()
    before = store.run_records()
    result = sweep(MODEL, SETUP, out, store=store, stream=io.StringIO(), balances=BALANCES)
    return store, before, result, out


@pytest.mark.integration
def test_interrupted_reusing_sweep_resumes_without_repeating_a_run(resumed):
    store, before, result, out = resumed
    cover = greedy_cover(BALANCES, "gpipe")
    k = len(before)
    assert 2 <= k < len(cover) == 7
    after = store.run_records()
    assert after[:k] == before  # nothing finished was measured again
    measured = [r.run.balance for r in after if not r.run.composed]
    assert len(measured) == len(set(measured)) == len(cover)
    # The killed sweep's runs are known: the resumed one covers only what is left.
    assert result.tally.measured == result.tally.cover == len(cover) - k
    assert result.tally.reused == k
    assert result.tally.composed == len(BALANCES) - len(cover) == 3
    assert [r.balance for r in result.sweep.runs] == BALANCES
    assert jsonio.load_sweep(out) == result.sweep
    assert all(r.samples_per_second is None and r.seconds == 0.0
               for r in result.sweep.runs if r.composed)
    # ... but the sweep carries an estimate for them, scaled on the measured runs, in the
    # file and in the store
    from mcap.core import throughput
    est = throughput.from_json(result.sweep.extra["throughput_estimate"])
    assert est.n == sum(1 for r in result.sweep.runs if not r.composed)
    assert all(est.samples_per_second(r.balance) > 0 for r in result.sweep.runs if r.composed)
    assert jsonio.load_sweep(out).extra == result.sweep.extra


@pytest.mark.integration
def test_composed_peaks_equal_direct_measurements_exactly(resumed):
    store, _, result, _ = resumed
    composed = [r for r in result.sweep.runs if r.composed]
    # The GPipe claim under test: a middle stage measured at one index stands for the
    # same layers at another index.
    measured_at = {(a, z, i) for r in result.sweep.runs if not r.composed
                   for i, (a, z) in enumerate(_bounds(r.balance))}
    assert any((a, z, i) not in measured_at and 0 < i < 3
               for r in composed for i, (a, z) in enumerate(_bounds(r.balance)))
    direct = sweep(MODEL, SETUP, None, store=store, stream=io.StringIO(), reuse=False,
                   balances=[r.balance for r in composed])
    assert direct.tally.measured == len(composed)
    for c, d in zip(composed, direct.sweep.runs):
        assert d.status == "ok" and not d.composed
        assert c.peaks == d.peaks, (c.balance, c.peaks, d.peaks)
        assert c.breakdown == d.breakdown


@pytest.mark.integration
def test_reusing_sweep_under_a_capacity_keeps_oom_exact(resumed, tmp_path):
    """Real oom runs through the reusing sweep (the inference on them is tested with the
    scripted measurer above): statuses and peaks as the uncapped truth says, and a
    resumed sweep measures nothing. Two partitionings only: every oom restarts the stage
    processes."""
    _, _, free, _ = resumed
    truth = {r.balance: r.peaks for r in free.sweep.runs}
    stage_peaks = sorted({p for peaks in truth.values() for p in peaks})
    capacity = (stage_peaks[-1] + stage_peaks[-2]) // 2  # the largest stage does not fit
    doomed = [b for b in BALANCES if max(truth[b]) > capacity]
    # One that fits, then one that does not: measured in this order (equal gains keep the
    # given order), so the restart an oom causes is the last thing the runner does.
    picked = [b for b in BALANCES if b not in doomed][:1] + doomed[:1]
    assert greedy_cover(picked, "gpipe") == picked
    capped = Setup(stages=4, batch_size=8, chunks=2, capacity_bytes=capacity)
    store = Store(tmp_path / "c.sqlite")
    result = sweep(MODEL, capped, tmp_path / "c.json", store=store, stream=io.StringIO(),
                   balances=picked)
    assert [r.balance for r in result.sweep.runs] == picked
    assert sum(r.status == "oom" for r in result.sweep.runs) >= 1
    for run in result.sweep.runs:
        assert run.status == ("oom" if max(truth[run.balance]) > capacity else "ok"), run
        if run.status == "ok":
            assert run.peaks == truth[run.balance]
    again = sweep(MODEL, capped, tmp_path / "c.json", store=store, stream=io.StringIO(),
                  balances=picked)
    assert again.tally.measured == 0 and again.sweep == result.sweep


def _bounds(balance):
    out, start = [], 0
    for n in balance:
        out.append((start, start + n - 1))
        start += n
    return out


# --- stages run alone: each distinct stage once (issue 25, item 5) --------------------

@pytest.fixture(scope="module")
def alone_resumed(tmp_path_factory):
    """A sweep of stages run alone, killed after two stages, then resumed."""
    tmp = tmp_path_factory.mktemp("alone")
    db, out = tmp / "s.sqlite", tmp / "sweep.json"
    env = {k: v for k, v in os.environ.items() if k != "MCAP_ISOLATION"}
    child = subprocess.Popen([sys.executable, "-c", SWEEP_CODE, str(db)], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    saved = os.environ.get("MCAP_ISOLATION")
    os.environ["MCAP_ISOLATION"] = "stage"  # the default, whatever fixture ran before
    try:
        store = Store(db)
        study = store.study(reuse_info(), SETUP)
        from mcap.runner.machine import collect
        here = collect(SETUP)
        deadline = time.monotonic() + 120
        try:
            while len(store.stage_runs(study, here)) < 2 and time.monotonic() < deadline:
                assert child.poll() is None, "sweep ended before it was killed"
                time.sleep(0.05)
        finally:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        before = store.stage_runs(study, here)
        result = sweep(MODEL, SETUP, out, store=store, stream=io.StringIO(), balances=BALANCES)
    finally:
        if saved is None:
            os.environ.pop("MCAP_ISOLATION", None)
        else:
            os.environ["MCAP_ISOLATION"] = saved
    return store, study, here, before, result, out


@pytest.fixture
def stage_env(monkeypatch):
    monkeypatch.setenv("MCAP_ISOLATION", "stage")


def reuse_info():
    from mcap.workflow.measuring import model_info
    return model_info(MODEL)


@pytest.mark.integration
def test_stages_run_alone_are_each_measured_once_and_compose_every_partitioning(
        alone_resumed, stage_env):
    store, study, here, before, result, out = alone_resumed
    keys = distinct_keys(BALANCES, "gpipe")
    stages = store.stage_runs(study, here)
    k = len(before)
    assert 2 <= k < len(keys)
    assert stages[:k] == before  # nothing finished was measured again
    measured = [stage_keys(r.balance, "gpipe")[r.stage] for r in stages]
    assert sorted(measured) == sorted(keys)  # every key, each once
    assert result.tally.measured == result.tally.cover == len(keys) - k
    # no whole partitioning was run: the stored runs are the saved sweep's composed ones
    assert all(r.run.composed for r in store.run_records())
    assert all(r.composed and r.status == "ok" for r in result.sweep.runs)
    # every partitioning has a throughput, estimated from its stages' own times
    assert all(r.estimated and r.samples_per_second > 0 and len(r.times) == 4
               for r in result.sweep.runs)
    assert jsonio.load_sweep(out) == result.sweep
    # the sweep names the link its estimates were made over, and that link gives them again
    from mcap.core import stagetime
    link = stagetime.link_from_json(result.sweep.extra[stagetime.KEY])
    assert link is not None and link.how == "gloo" and link.bytes_per_second > 0
    for r in result.sweep.runs:
        assert stagetime.samples_per_second(r.times, SETUP, link) == r.samples_per_second
    # composed peaks are what measuring the partitioning whole reads, to the byte
    direct = sweep(MODEL, SETUP, None, store=store, stream=io.StringIO(), reuse=False,
                   balances=BALANCES[:3])
    for c, d in zip(result.sweep.runs, direct.sweep.runs):
        assert not d.composed and d.peaks == c.peaks and d.breakdown == c.breakdown
    again = sweep(MODEL, SETUP, None, store=store, stream=io.StringIO(), balances=BALANCES)
    assert again.tally.measured == 0


@pytest.mark.integration
def test_a_stage_over_the_capacity_alone_is_oom_for_every_partitioning_holding_it(
        alone_resumed, tmp_path, stage_env):
    _, _, _, _, free, _ = alone_resumed
    truth = {r.balance: r.peaks for r in free.sweep.runs}
    stage_peaks = sorted({p for peaks in truth.values() for p in peaks})
    capacity = (stage_peaks[-1] + stage_peaks[-2]) // 2  # the largest stage does not fit
    capped = Setup(stages=4, batch_size=8, chunks=2, capacity_bytes=capacity)
    store = Store(tmp_path / "c.sqlite")
    result = sweep(MODEL, capped, None, store=store, stream=io.StringIO(), balances=BALANCES)
    assert sum(r.status == "oom" for r in result.sweep.runs) >= 1
    for run in result.sweep.runs:
        assert run.status == ("oom" if max(truth[run.balance]) > capacity else "ok"), run
        if run.status == "ok":
            assert run.peaks == truth[run.balance]
