"""Profiling under a capacity (mCAP 3.5): windows proven over the capacity by the stage an
oom run names, the mem_added lower bound where no window pair can fit, and the fallback
(``replan`` + ``safefill``) that completes the statistics without planning a run that
holds a proven-over window. Pure core: synthetic peaks, no torch."""
from __future__ import annotations

import pytest

from mcap.core.profiling import safefill
from mcap.core.errors import InvalidStatistics
from mcap.core.profiling.schedule import profiling_plan, replan
from mcap.core.predict import cost_table
from mcap.core.profiling.stats import (bounded_added, doomed, extract, missing_for_windows,
                             over_capacity, over_capacity_windows, stage_windows)
from mcap.core.types import Run

CAP = 41_943_040  # 40 MiB
# Parameter bytes of AmoebaNet-D(6, 96)'s 12 layers (amoebanet-d:layers=6,filters=96):
# the heavy cells 8, 9, 10 sit at the end, as in
# bench/log/2026-11-24-scaling-profiling-under-capacity.md.
P = [2784, 43296, 196032, 384384, 476544, 1106304, 1598208, 1893120, 4406016, 6366720,
     7546368, 61480]


def peak(a: int, z: int) -> int:
    """A device's peak for layers a..z: weights + gradients + momentum, a temporary the
    size of the largest parameter tensor and activations per layer (the shape of the
    measured AmoebaNet peaks; under these numbers PM(9..10) is over 40 MiB, PM(8..9) not)."""
    return 3 * sum(P[a:z + 1]) + max(P[a:z + 1]) + 700_000 * (z - a + 1)


def oom_message(rank: int, a: int, z: int, cap=CAP) -> str:
    # The runner's form (mcap.runner.pipelining): "stage R (layers a..z): <first line>".
    return (f"stage {rank} (layers {a}..{z}): mcap memtrack: out of memory: allocating 5 bytes "
            f"with {peak(a, z)} bytes held would exceed the capacity of {cap} bytes")


def measure(balance) -> Run:
    """The first stage over the capacity raises; the others stop early (no evidence)."""
    wins = stage_windows(balance)
    for rank, (a, z) in enumerate(wins):
        if peak(a, z) > CAP:
            return Run(tuple(balance), "oom", None, 1.0, error=oom_message(rank, a, z))
    return Run(tuple(balance), "ok", tuple(peak(a, z) for a, z in wins), 1.0)


def test_over_capacity_takes_only_the_stage_the_error_names():
    run = Run((8, 1, 2, 1), "oom", None, 1.0,
              error=oom_message(2, 9, 10) + "; stage 3 (layers 11..11): RuntimeError: peer gone")
    assert over_capacity([run]) == {(9, 10): CAP}
    # A message naming layers that are not that stage of the balance is not trusted.
    wrong = Run((8, 1, 2, 1), "oom", None, 1.0, error=oom_message(1, 9, 10))
    assert over_capacity_windows([wrong]) == frozenset()
    # Failed runs and ok runs prove nothing; a CUDA OOM proves the window, capacity unknown.
    failed = Run((8, 1, 2, 1), "failed", None, 1.0, error=oom_message(2, 9, 10))
    cuda = Run((8, 1, 2, 1), "oom", None, 1.0,
               error="stage 2 (layers 9..10): CUDA out of memory. Tried to allocate 2.00 MiB")
    assert over_capacity([failed]) == {}
    assert over_capacity([cuda]) == {(9, 10): None}
    assert doomed((8, 11), {(9, 10)}) and not doomed((10, 11), {(9, 10)})


def test_pair_over_the_capacity_gives_the_lower_bound_of_mem_added():
    ok = [measure(b) for b in [(8, 1, 1, 2), (7, 1, 2, 2), (7, 2, 1, 2), (1, 7, 2, 2), (6, 2, 2, 2),
                               (2, 6, 2, 2), (5, 3, 2, 2), (3, 5, 2, 2), (4, 4, 2, 2), (8, 2, 1, 1)]]
    assert all(r.status == "ok" for r in ok)
    # Without the oom run nothing gives mem_added(10): every pair n..9, n..10 holds 9..10.
    with pytest.raises(InvalidStatistics, match="mem_added for layers .*10"):
        extract(ok, 12)
    runs = ok + [measure((8, 1, 2, 1))]
    assert runs[-1].status == "oom"
    stats = extract(runs, 12)
    assert bounded_added(runs, 12) == (10,)
    assert stats.mem_added[10] == CAP + 1 - peak(9, 9)
    # Listing 1.1 now predicts a stage holding 9 and 10 just over the capacity, i.e. the
    # partitioning does not fit (true: 9..10 ran out); the measured stages stay exact.
    table = cost_table(stats)
    assert table.stage(9, 10) == CAP + 1 and table.stage(8, 10) > CAP
    assert table.stage(10, 11) == peak(10, 11) and table.stage(8, 9) == peak(8, 9)
    # The same error without a stated capacity (a CUDA OOM) leaves the statistic missing.
    cuda = Run((8, 1, 2, 1), "oom", None, 1.0, error="stage 2 (layers 9..10): CUDA out of memory.")
    with pytest.raises(InvalidStatistics, match="mem_added"):
        extract(ok + [cuda], 12)
    # Coverage (what plans check) agrees once layer 9 alone was measured.
    wins = {w for r in ok for w in stage_windows(r.balance)}
    assert 10 in missing_for_windows(12, wins, 4).added
    assert 10 not in missing_for_windows(12, wins, 4, over={(9, 10)}).added


def test_replan_completes_profiling_where_the_plan_runs_out_of_the_capacity():
    """The AmoebaNet-D(6, 96) case of
    bench/log/2026-11-24-scaling-profiling-under-capacity.md: every run of the plan but one holds
    an over window; replan alone must complete the statistics in few rounds, never
    planning a balance with a stage that holds a proven-over window."""
    runs = {b: measure(b) for b in profiling_plan(12, 4).runs}
    assert sum(r.status == "oom" for r in runs.values()) >= 7
    for _ in range(5):
        ok = [r for r in runs.values() if r.status == "ok"]
        bad = [r for r in runs.values() if r.status != "ok"]
        extra = replan(12, 4, ok, bad, list(runs))
        if not extra:
            break
        over = over_capacity_windows(bad)
        for b in extra:
            assert b not in runs and sum(b) == 12 and len(b) == 4
            assert not any(doomed(w, over) for w in stage_windows(b)), (b, over)
            runs[b] = measure(b)
    else:
        pytest.fail("replan did not converge")
    all_runs = list(runs.values())
    stats = extract(all_runs, 12)
    assert bounded_added(all_runs, 12) == (10,)
    # mem_isolated is exact for every layer (measured alone or derived; additive here
    # within a window holding no new largest tensor) and layer 9 alone is measured.
    assert stats.mem_isolated[9] == peak(9, 9) and stats.mem_isolated[11] == peak(11, 11)
    table = cost_table(stats)
    assert table.stage(10, 11) == peak(10, 11)
    assert table.stage(9, 10) > CAP


def test_oom_run_naming_its_stage_clears_its_other_stages():
    # (8,1,2,1) ran out on 9..10 only: its window 0..7 is not a suspect, so replan may use
    # it; a run that names no stage (failed) keeps all of its windows suspect.
    ok = [measure((7, 1, 2, 2))]
    bad = [measure((8, 1, 2, 1))]
    extra = replan(12, 4, ok, bad)
    assert extra and all(not doomed(w, {(9, 10)}) for b in extra for w in stage_windows(b))


def test_safefill_splits_the_rest_around_over_windows():
    over = {(9, 10), (0, 8)}
    # Layer 1 alone leaves 0 and 2..11 to 2 stages: 2..9 and 10..11 is the only way.
    assert list(safefill.fills(0, 11, 4, [(1, 1)], over)) == [(1, 1, 8, 2)]
    assert list(safefill.fills(0, 11, 4, [(1, 1)], over | {(8, 9)})) == []
    fills = list(safefill.fills(0, 11, 4, [(10, 11)], over))
    # The shortest longest free stage first, then the fewest layers on the long ones.
    assert fills[:2] == [(3, 3, 4, 2), (3, 4, 3, 2)]
    for f in fills:
        wins = stage_windows(f)
        assert (10, 11) in wins and not any(doomed(w, over) for w in wins)
    assert list(safefill.fills(0, 11, 4, [(9, 10)], over)) == []  # the window itself is over


def test_feasible_lists_every_partitioning_without_an_over_stage():
    # AmoebaNet-D(6, 104) under 40 MiB
    # (bench/log/2026-11-24-scaling-profiling-under-capacity.md): 8..9 and 9..10 never fit, nor do
    # 0..8 and 4..8; 4 of the 165 partitionings are left, (k, 9-k, 1, 2) for k = 5..8.
    over = {(8, 9), (9, 10), (0, 8), (4, 8)}
    assert safefill.feasible(12, 4, over, 16) == [(5, 4, 1, 2), (6, 3, 1, 2), (7, 2, 1, 2),
                                                   (8, 1, 1, 2)]
    assert safefill.feasible(12, 4, over, 3) is None  # more than the limit
    assert len(safefill.feasible(12, 4, set(), 200)) == 165
    assert safefill.feasible(12, 4, {(9, 9)}, 16) == []  # layer 9 alone does not fit


def test_profile_measures_the_whole_space_left_by_over_windows():
    """profiling._measure_space: statistics that cannot be completed (AmoebaNet-D(6, 104)'s
    shape), but few partitionings can train; those not measured yet are measured, and a new
    oom shrinks the space before it is returned."""
    from mcap.workflow.profiling import _measure_space
    truly_over = {(8, 9), (9, 10), (0, 8), (4, 8), (5, 8)}

    def get(balance):
        for rank, (a, z) in enumerate(stage_windows(balance)):
            if any(a <= x and y <= z for x, y in truly_over):
                return Run(tuple(balance), "oom", None, 1.0, error=oom_message(rank, a, z))
        return Run(tuple(balance), "ok", tuple(10 * n for n in balance), 1.0)

    class Bar:
        def grow(self, n):
            pass

    known = [(8, 1, 2, 1), (9, 1, 1, 1), (7, 1, 2, 2), (4, 5, 1, 2), (7, 2, 1, 2)]
    runs = {b: get(b) for b in known}
    fallback: list = []
    space = _measure_space(12, 4, runs, get, fallback, Bar())
    # (5, 4, 1, 2) looked possible until it ran out on 5..8; the rest is the space.
    assert [r.balance for r in space] == [(6, 3, 1, 2), (7, 2, 1, 2), (8, 1, 1, 2)]
    assert all(r.status == "ok" for r in space)
    assert set(fallback) == {(5, 4, 1, 2), (6, 3, 1, 2), (8, 1, 1, 2)}
    # Nothing proven over: no space (the statistics' own message stands).
    assert _measure_space(12, 4, {(7, 2, 1, 2): get((7, 2, 1, 2))}, get, [], Bar()) == ()
