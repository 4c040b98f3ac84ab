"""MPress's planner (mcap.core.press): the model, the approximated search and the exact MILP
on constructed problems (real profiles with press statistics come from profiling)."""
import pytest

from mcap.core.errors import McapError
from mcap.core.press import outcome, problem_from, smallest_capacity, solve
from mcap.core.press.model import live_intervals
from mcap.core.press.actions import LayerAction
from tests.conftest import press_best, press_case, press_profile

MiB = 2**20


@pytest.mark.parametrize("seed", range(20))
def test_both_fit_every_device_and_milp_is_no_worse(seed):
    p, cap = press_case(seed)
    h, m = solve(p, cap, "mpress"), solve(p, cap, "milp")
    for plan in (h, m):
        acts = [a for stage in plan.stages for a in stage]
        o = outcome(p, acts)
        assert max(plan.predicted_peaks) <= cap and o.peaks == plan.predicted_peaks
        assert plan.predicted_work_seconds == pytest.approx(o.added_seconds)
        # the wall clock grows by at most the work summed over stages (the schedule runs
        # stages side by side; work off the critical path can hide in its slack)
        assert 0 <= plan.predicted_added_seconds <= plan.predicted_work_seconds + 1e-12
    assert m.predicted_work_seconds <= h.predicted_work_seconds + 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_every_registered_planner_fits_and_the_model_agrees(seed):
    """The planner registry's contract: every registered planner's plan fits the capacity,
    one action per layer, and its predicted peaks and work are ``model.outcome``'s."""
    from mcap.core.press import names
    p, cap = press_case(seed)
    for method in names():
        plan = solve(p, cap, method)
        acts = [a for stage in plan.stages for a in stage]
        assert len(acts) == sum(p.balance) and plan.method == method
        o = outcome(p, acts)
        assert max(plan.predicted_peaks) <= cap and o.peaks == plan.predicted_peaks
        assert plan.predicted_work_seconds == pytest.approx(o.added_seconds)


def test_heuristic_within_measured_factor_of_exact():
    """Over 40 random cases the heuristic's added time is within 1.2x of the exact plan's in
    total (bench/bench_press_planner.py reports the per-case distribution)."""
    h = m = 0.0
    for seed in range(100, 140):
        p, cap = press_case(seed, L=10)
        h += solve(p, cap, "mpress").predicted_work_seconds
        m += solve(p, cap, "milp").predicted_work_seconds
    assert m > 0 and h <= 1.2 * m


@pytest.mark.parametrize("seed", range(6))
def test_milp_is_exact_and_smallest_capacity_is_smallest(seed):
    p, cap = press_case(seed, L=5, G=2)
    assert solve(p, cap, "milp").predicted_work_seconds == pytest.approx(press_best(p, cap), abs=1e-6)
    least = smallest_capacity(p)
    assert press_best(p, least) is not None and press_best(p, least - 1) is None


def test_d2d_adds_to_the_target_and_frees_the_source():
    p = problem_from("toy", (2, 2), (500 * MiB, 300 * MiB), "1f1b", 4, [10 * MiB, 20 * MiB, 5 * MiB,
                     5 * MiB], [0.01] * 4, 1e9, 1e10)
    assert p.held == (2, 1)
    o = outcome(p, [LayerAction(0), LayerAction(1, "d2d", 1), LayerAction(2), LayerAction(3)])
    # source: keep-all peaks with both micro-batches' 30 MiB held; with layer 1 away, its
    # highest moment is the second micro-batch's forward of layer 1 (the first's 20 MiB are
    # away, the second's are being made) or a backward (one micro-batch's 20 MiB back):
    # 20 MiB lower. The target holds both micro-batches' copies.
    assert o.peaks == (500 * MiB - 20 * MiB, 300 * MiB + 2 * 20 * MiB)
    assert o.received == (0, 40 * MiB) and o.freed[0]["d2d"] == 20 * MiB
    assert o.transient[0] == o.shift[0] == 0
    with pytest.raises(McapError, match="d2d target 0"):
        outcome(p, [LayerAction(0), LayerAction(1, "d2d", 0), LayerAction(2), LayerAction(3)])


def test_unreachable_capacity_names_the_smallest():
    p, _ = press_case(3)
    least = smallest_capacity(p)
    for method in ("mpress", "milp"):
        assert max(solve(p, least, method).predicted_peaks) <= least
        with pytest.raises(McapError, match=f"smallest capacity that can be met is {least:,} bytes"):
            solve(p, least - 1, method)


def test_live_intervals_follow_the_schedule():
    # GPipe, 2 stages of one layer, 2 micro-batches, forward 1 s: the last stage runs
    # F0 F1 B0 B1 (torch's ScheduleGPipe: backwards in micro-batch order), so micro-batch 0's
    # activations live 1 s (F1) and micro-batch 1's 2 s (B0).
    live = live_intervals((1, 1), "gpipe", 2, [1.0, 1.0])
    assert live[1] == (1.0, 2.0)
    p = problem_from("toy", (1, 1), (100, 100), "gpipe", 2, [10, 10], [1.0, 1.0], 10.0, 10.0)
    # swap: 2 x 10 B / 10 B/s = 2 s per micro-batch, 1 s of it hidden for micro-batch 0 and
    # all of it for micro-batch 1
    assert p.costs[1]["swap"] == pytest.approx(1.0) and p.costs[1]["recompute"] == 2.0


def test_bad_input_names_values():
    with pytest.raises(McapError, match="unknown press method 'ilp'"):
        solve(press_case(0)[0], 10**9, "ilp")
    with pytest.raises(McapError, match="3 saved sizes"):
        problem_from("toy", (2, 2), (1, 1), "gpipe", 2, [1, 1, 1], [0.1] * 3, 1.0, 1.0)


def test_profile_checks_checkpoint_mode_and_statistics():
    import dataclasses

    from mcap.core.press import problem
    from mcap.core.types import PressStats
    from mcap.io import jsonio
    prof = jsonio.load_profile("data/vgg11-h512-b8-cpu4.profile.json")
    with pytest.raises(McapError, match="profile ... --checkpoint never --press"):
        problem(prof, (13, 3, 1, 13))
    n = prof.model.num_layers
    prof = dataclasses.replace(prof, press=PressStats((1000,) * n, (0.01,) * n, 1e9, 1e10))
    with pytest.raises(McapError, match="checkpoint 'except_last'"):
        problem(prof, (13, 3, 1, 13))
    ok = dataclasses.replace(prof, setup=dataclasses.replace(prof.setup, checkpoint="never"))
    p = problem(ok, (13, 3, 1, 13))
    assert p.held == (4, 4, 4, 4) and len(p.base) == 4


def test_joint_floor_is_the_least_over_every_partitioning_and_scale_search():
    from mcap.core.partition import enumerate_all
    from mcap.core.press import joint, problem
    from mcap.core.press import scale as pscale
    from mcap.core.press.jointsearch import floor_of
    prof = press_profile()
    L = prof.model.num_layers
    every = [tuple(int(x) for x in b) for chunk in enumerate_all(L, 3) for b in chunk]
    floors = {b: smallest_capacity(problem(prof, b)) for b in every}
    peak, floor = floor_of(prof, 3)
    assert floor == min(floors.values()) and floor < peak  # the vectorised floor is the model's
    j = joint(prof, 3, floor)  # the floor is reachable, one byte less is not
    assert max(j.plan.predicted_peaks) <= floor
    with pytest.raises(McapError, match=f"smallest capacity that can be met is {floor:,}"):
        joint(prof, 3, floor - 1)
    # scale: sizes 1..10 whose keep-all peak and floor grow; capacity between them
    pts = {v: pscale.PressPoint(v, f"m:{v}", 100 * v, 10 * v, 7 * v) for v in range(1, 11)}
    alone, pressed = pscale.search(range(1, 11), pts.__getitem__, 56)
    s = pscale.PressScaling("m", "v", 56, tuple(pts.values()), alone, pressed)
    assert (alone, pressed, s.ratio) == (5, 8, 8 / 5)
    assert pscale.to_dict(s)["ratio"] == 1.6 and "1.60x" in pscale.report(s)


def test_cpu_stages_do_not_overlap_swaps():
    kw = dict(model="toy", balance=(1, 1), base=(100, 100), schedule="gpipe", chunks=2,
              saved=[10, 10], forward=[1.0, 1.0], host_bandwidth=10.0, d2d_bandwidth=20.0)
    hidden, synchronous = problem_from(**kw), problem_from(**kw, overlap=False)
    assert hidden.costs[0]["swap"] == 0.0  # stage 0's live intervals hide 2 s transfers
    assert synchronous.costs[0]["swap"] == pytest.approx(2 * 2.0)  # 2 micro-batches x 2 s
    assert synchronous.costs[0]["d2d"] == pytest.approx(2 * 1.0)


def test_savers_figure_data_adds_up():
    from mcap.figures import press as fig_press
    p, cap = press_case(3)
    plan = solve(p, cap, "milp")
    t = fig_press.savers_table(p, plan)
    freed = t["recompute"] + t["swap"] + t["d2d"]
    assert list(t["before"] - t["lower then"] - freed + t["transient"] + t["received"]
                + t["segment"]) == list(plan.predicted_peaks)
    # a peer holds every micro-batch's copy; the source has at most that away at its peak
    assert t["received"].sum() >= t["d2d"].sum()
    grid = fig_press.plan_grid(plan)
    assert grid.shape == (p.stages, len(p.saved))
    assert sum(v not in ("", "keep") for v in grid.to_numpy().ravel()) == \
        len(p.saved) - plan.counts()["keep"]
    fig_press.draw_savers(t, cap, p.balance)
    fig_press.draw_plan_grid(plan)


H200 = "tests/fixtures/gpt-l8-h1024-b16-h200x4-press.profile.json"  # profile --press, one H200


@pytest.mark.parametrize("frac", [0.85, 0.7])
@pytest.mark.parametrize("method", ["mpress", "milp"])
def test_cuda_plans_pay_for_what_they_add(frac, method):
    """On the H200 (issue 30) every plan's predicted_added_seconds was 0.0, swaps included,
    while the measured windows grew: the model hid CUDA swaps in live intervals, but the
    runner queues the copies on the compute stream, so nothing overlaps there either. A
    swap now costs what profile --press measured for it on the GPU, a recompute too."""
    from mcap.core.press import problem, to_plan
    from mcap.core.press.model import floor_actions
    from mcap.io import jsonio

    prof = jsonio.load_profile(H200)
    bal, chunks, stats = (3, 2, 2, 3), prof.setup.chunks, prof.press
    p = problem(prof, bal)
    for l in range(1, 9):  # the blocks: 2.5-2.7 ms per micro-batch, swapped out and back
        assert p.costs[l]["swap"] == pytest.approx(chunks * stats.swap_seconds[l], rel=0.02)
        assert p.costs[l]["recompute"] == pytest.approx(chunks * stats.recompute_seconds[l])
        assert p.costs[l]["d2d"] > 0
    swapped = to_plan(p, floor_actions(p), "floor", None)  # every block swapped
    assert swapped.predicted_added_seconds > chunks * stats.swap_seconds[7]
    cap = int(frac * max(p.base))  # press_check.py's capacities
    plan = solve(problem(prof, bal, cap), cap, method)
    assert plan.counts()["keep"] < prof.model.num_layers
    assert plan.predicted_added_seconds > 0


def test_stages_sharing_a_gpu_add_up_what_plans_add():
    """Stage processes sharing one GPU take turns on it (``PressStats.gpus``, recorded by
    profile --press on CUDA): the time a plan adds to each stage adds up, as on CPU stage
    processes sharing cores; on one GPU per stage the schedule's delay alone counts."""
    import dataclasses

    from mcap.core.press import problem, to_plan
    from mcap.core.press.model import floor_actions
    from mcap.io import jsonio

    prof = jsonio.load_profile(H200)
    assert prof.press.gpus is None  # measured before it was recorded: stages in parallel
    shared = dataclasses.replace(prof, press=dataclasses.replace(prof.press, gpus=1))
    apart = dataclasses.replace(prof, press=dataclasses.replace(prof.press, gpus=4))
    bal = (3, 2, 2, 3)
    plans = {name: to_plan(problem(q, bal), floor_actions(problem(q, bal)), "floor", None)
             for name, q in (("old", prof), ("one", shared), ("four", apart))}
    assert plans["four"].predicted_added_seconds == plans["old"].predicted_added_seconds
    assert plans["one"].predicted_added_seconds > plans["four"].predicted_added_seconds
    p = problem(shared, bal)
    work = sum(p.costs[a.layer][a.action] for a in floor_actions(p) if a.action != "keep")
    assert plans["one"].predicted_added_seconds == pytest.approx(work)
    assert plans["one"].predicted_work_seconds == pytest.approx(work)
