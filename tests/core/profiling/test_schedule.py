import pytest

from mcap.core.errors import McapError
from mcap.core.profiling.schedule import minimum_layers, profiling_plan, replan
from mcap.core.profiling.stats import extract, missing_statistics, stage_windows
from mcap.core.types import Run

CASES = [(L, G) for G in (2, 3, 4, 5, 8) for L in range(G + 1, 3 * G + 6)] + [(30, 4), (36, 4), (60, 8)]


def true_peak(a, z):
    """A made-up, additive-in-layers model (weights plus a max over activations)."""
    weights = sum(10 + 3 * (l % 5) for l in range(a, z + 1))
    acts = max(50 + 17 * ((l * 7) % 11) for l in range(a, z + 1))
    return 1000 + weights + acts


def run_of(balance, capacity=None):
    peaks = tuple(true_peak(a, z) for a, z in stage_windows(balance))
    if capacity is not None and max(peaks) > capacity:
        return Run(balance=balance, status="oom", peaks=None, seconds=0.1, error="out of memory")
    return Run(balance=balance, status="ok", peaks=peaks, seconds=0.1)


@pytest.mark.parametrize("scheme", ["mcap", "capture"])
@pytest.mark.parametrize("L,G", CASES)
def test_plan_is_valid_complete_and_without_duplicates(L, G, scheme):
    if L < minimum_layers(G, scheme):
        with pytest.raises(McapError, match=f"needs at least {minimum_layers(G, scheme)} layers"):
            profiling_plan(L, G, scheme)
        return
    plan = profiling_plan(L, G, scheme)
    assert len(set(plan.runs)) == len(plan.runs)
    assert all(len(r) == G and sum(r) == L and min(r) >= 1 for r in plan.runs)
    assert not missing_statistics(L, plan.runs)
    stats = extract([run_of(b) for b in plan.runs], L)
    assert len(stats.mem_isolated) == L and stats.mem_added[0] is None
    if G >= 3:  # measured directly: every mem_isolated is a singleton window
        assert stats.mem_isolated == tuple(true_peak(l, l) for l in range(L))


@pytest.mark.parametrize("L,G", [(30, 4), (36, 4), (60, 8), (100, 8), (24, 6), (200, 16)])
def test_mcap_plan_meets_the_papers_run_count(L, G):
    plan = profiling_plan(L, G)
    assert len(plan.runs) == L - G + 1
    # Layers 1..L-G take mem_added from prefixes (n = 0), as in the paper.
    assert all(plan.sources.added[l] == 0 for l in range(1, L - G + 1))
    assert plan.runs[0][:2] == (1, 1) and plan.runs[-1] == (L - G + 1,) + (1,) * (G - 1)


def test_g3_needs_one_extra_run():
    # With 3 stages the L-2 prefix runs are forced to (k, 1, L-k-1); none has a stage
    # ending at L-2 with more than one layer, so mem_added(L-2) takes one more run.
    assert len(profiling_plan(30, 3).runs) == 29


def test_two_stages_is_the_whole_space_and_predicts_it_exactly():
    from mcap.core.predict import predict
    L = 9
    plan = profiling_plan(L, 2)
    assert plan.runs == tuple((k, L - k) for k in range(1, L))
    stats = extract([run_of(b) for b in plan.runs], L)
    assert stats.mem_added[L - 1] == 0  # the documented assumption
    for b in plan.runs:
        assert predict(stats, b).peaks == run_of(b).peaks


@pytest.mark.parametrize("L,G,needle", [
    (4, 4, "needs at least 5 layers on 4 stages, the model has 4"),
    (7, 4, "capture scheme needs at least 8 layers"),
    (5, 1, "at least 2 stages"),
    (5, 0, "stages must be an integer >= 1, got 0"),
])
def test_plan_errors_name_values(L, G, needle):
    scheme = "capture" if "capture" in needle else "mcap"
    with pytest.raises(McapError, match=needle):
        profiling_plan(L, G, scheme)


def test_unknown_scheme():
    with pytest.raises(McapError, match="unknown profiling scheme 'x'"):
        profiling_plan(10, 3, "x")


def test_missing_statistics_names_layers():
    missing = missing_statistics(10, [(1, 1, 8)])
    assert missing.isolated == (2, 3, 4, 5, 6, 7, 8, 9)
    assert "mem_added for layers 1, 2" in missing.describe()


@pytest.mark.parametrize("L,G", [(30, 4), (20, 5), (24, 6)])
def test_replan_recovers_from_oom_until_complete(L, G):
    """Under a capacity that kills the long-prefix runs, replanning still completes."""
    plan = profiling_plan(L, G)
    # Every window of up to L/2 layers fits; some longer prefixes run out of memory.
    capacity = max(true_peak(a, z) for a in range(L) for z in range(a, min(L, a + L // 2)))
    assert any(max(run_of(b).peaks) > capacity for b in plan.runs)
    ok, failed = [], []
    todo = list(plan.runs)
    for _ in range(10):
        for b in todo:
            r = run_of(b, capacity)
            (ok if r.status == "ok" else failed).append(r)
        assert failed
        todo = list(replan(L, G, ok, failed, planned=[r.balance for r in ok + failed]))
        if not todo:
            break
        assert not set(todo) & {r.balance for r in ok + failed}  # never repeats a run
    assert not missing_statistics(L, ok)
    stats = extract(ok + failed, L)
    assert stats.mem_isolated == tuple(true_peak(l, l) for l in range(L))


def test_replan_nothing_missing_returns_empty():
    plan = profiling_plan(12, 3)
    assert replan(12, 3, [run_of(b) for b in plan.runs], []) == ()


def test_replan_error_when_the_only_run_for_a_layer_failed():
    # On 3 stages layer 1 can be alone only in (1, 1, L-2).
    with pytest.raises(McapError, match=r"every 3-stage run holding layers \[\(1, 1\)\] has already failed"):
        replan(12, 3, [], [Run(balance=(1, 1, 10), status="oom", peaks=None, seconds=0.0)])


def test_replan_error_when_a_layer_alone_always_fails():
    L, G = 6, 3
    with pytest.raises(McapError):
        ok, failed = [], []
        for _ in range(30):
            todo = replan(L, G, ok, failed, planned=[r.balance for r in failed])
            assert todo
            failed += [Run(balance=b, status="oom", peaks=None, seconds=0.0) for b in todo]
