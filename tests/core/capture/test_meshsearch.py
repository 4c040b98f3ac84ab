"""CAPTURE's pure core: plan text, mesh placement rules, the recommender on a mesh (Algorithm 4
and the exact DP agree), the logarithmic degree fit, batch-size lines and the layer merger."""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.capture.plan import (
    MAX_DEVICES, HybridPlan, Mesh, StageConfig, batch_line, check_plan, log_degree, merge_layers, parse_mesh,
    parse_plan,
)
from mcap.core.capture.meshsearch import configs, enumerate_plans, exact_plan
from mcap.core.recommend import recommend
from mcap.core.types import LayerStats


def test_plan_text_round_trips_and_counts_devices():
    plan = parse_plan("3,3,10:tp2")
    assert plan.stages == (StageConfig(3), StageConfig(3), StageConfig(10, "tp", 2))
    assert plan.text == "3,3,10:tp2" and plan.devices == 4 and plan.balance == (3, 3, 10)
    assert plan.as_json()[2] == {"layers": 10, "parallel": "tp", "degree": 2}
    assert parse_plan("4:dp1").stages == (StageConfig(4),)  # 1-way is pipeline-only
    assert plan.device_stage() == (0, 1, 2, 2)


@pytest.mark.parametrize("text,message", [
    ("3,x,4", "stage 1 is 'x'"), ("3,0,4", "stage 1 has 0 layers"), ("3,4:pp2", "stage 1 is '4:pp2'"),
    ("3,4:tp0", "stage 1 has degree 0"), ("", "stage 0 is ''")])
def test_bad_plan_text_names_the_stage(text, message):
    with pytest.raises(InvalidPartitioning, match=message):
        parse_plan(text)


@pytest.mark.parametrize("text,message", [
    ("10:tp99999999999999999999", "degree 999999999999... \\(20 digits\\) is over every bound"),
    ("1" * 5000, "layer count 111111111111... \\(5000 digits\\)"),
    ("10:tp100000000", "degree 100000000, which is not a power of 2"),
    ("4:tp1000", "degree 1000, which is not a power of 2"), ("2,2:dp6", "stage 1 has degree 6"),
    ("10:tp131072", "degree 131,072; a plan has at most 65,536 devices"),
    ("1:tp32768,1:tp32768,1", "uses more than 65,536 devices \\(stages 0..2 already 65,537\\)"),
    (",".join(["1"] * 70000), "uses more than 65,536 devices")])
def test_plan_sizes_are_refused_when_parsed(text, message):
    """Degrees are powers of 2 and a plan has at most MAX_DEVICES devices, refused before
    anything is allocated (10:tp100000000 once asked for 10^8 per-device peaks)."""
    with pytest.raises(InvalidPartitioning, match=message) as err:
        parse_plan(text)
    assert len(str(err.value)) < 400  # a 5000-digit plan is not echoed whole
    assert parse_plan("10:tp65536").devices == MAX_DEVICES  # the bound itself is a plan


def test_mesh_sizes_are_refused_when_parsed():
    assert parse_mesh("256x256").devices == MAX_DEVICES
    with pytest.raises(McapError, match="mesh 1000x1000 has 1,000,000 devices; a mesh has at most"):
        parse_mesh("1000x1000")
    with pytest.raises(McapError, match=r"\(30 digits\) is over every bound"):
        parse_mesh("1x" + "9" * 30)


def test_plans_must_fit_the_model_and_the_mesh_naming_the_numbers():
    mesh = parse_mesh("2x4")
    assert check_plan(parse_plan("2,2,4:dp2,6:tp4"), 14, mesh)
    with pytest.raises(InvalidPartitioning, match="places 14 layers but the model has 15"):
        check_plan(parse_plan("2,2,4:dp2,6:tp4"), 15, mesh)
    with pytest.raises(InvalidPartitioning, match="uses 6 devices but mesh 2x4 has 8"):
        check_plan(parse_plan("2,2,4:dp2,6:tp2"), 14, mesh)
    with pytest.raises(InvalidPartitioning, match="would span nodes 0 and 1"):
        check_plan(parse_plan("2,2,2,4:dp2,4:dp2,2"), 16, mesh)
    with pytest.raises(InvalidPartitioning, match="degree 8 but a node of mesh 2x4 has 4"):
        check_plan(parse_plan("4:dp8"), 4, mesh)
    with pytest.raises(McapError, match="is not NxK"):
        parse_mesh("4")


def _random_cost(L, seed):
    """A stage cost that depends only on (first, last, parallelism, degree) and the seed,
    whatever order a search asks in."""
    def cost(a, z, par, d):
        rng = np.random.default_rng([seed, a, z, ("pp", "dp", "tp").index(par), d])
        base = int(rng.integers(50, 100)) * (z - a + 1)
        return base // d + int(rng.integers(0, 30)) if par != "pp" else base
    return cost


def _brute(L, mesh, cost):
    """Every plan by brute force, independently of both searches."""
    K, D = mesh.per_node, mesh.devices
    best = None
    for stages in range(1, min(L, D) + 1):
        for cuts in itertools.combinations(range(1, L), stages - 1):
            sizes = np.diff((0,) + cuts + (L,))
            for cfg in itertools.product(configs(mesh), repeat=stages):
                plan = HybridPlan(tuple(StageConfig(int(n), p, d) for n, (p, d) in zip(sizes, cfg)))
                try:
                    check_plan(plan, L, mesh)
                except InvalidPartitioning:
                    continue
                vec, start = [], 0
                for s in plan.stages:
                    vec += [cost(start, start + s.layers - 1, s.parallel, s.degree)] * s.degree
                    start += s.layers
                k = (tuple(sorted(vec, reverse=True)),
                     tuple((s.layers, s.parallel, s.degree) for s in plan.stages))
                if best is None or k < best[0]:
                    best = (k, plan)
    return best[1]


@pytest.mark.parametrize("L,mesh,seed", [(5, "1x4", 0), (6, "2x2", 1), (7, "2x4", 2), (6, "1x2", 3),
                                         (8, "2x2", 4)])
def test_exact_dp_and_algorithm_4_find_the_same_best_plan(L, mesh, seed):
    m = parse_mesh(mesh)
    cost = _random_cost(L, seed)
    want = _brute(L, m, cost)
    pruned = enumerate_plans(L, m, cost)
    full = enumerate_plans(L, m, cost, prune=False)
    dp = exact_plan(L, m, cost)
    assert pruned.plan == full.plan == dp.plan == want
    assert pruned.peaks == dp.peaks and pruned.explored <= full.explored
    check_plan(dp.plan, L, m)


@pytest.mark.parametrize("L,mesh,seed", [(5, "1x4", 0), (7, "2x4", 2), (8, "2x2", 4)])
def test_every_registered_mesh_search_finds_the_best_plan(L, mesh, seed):
    """The mesh-search registry's contract: each registered search returns the plan of
    lowest sorted per-device peaks (the brute force), with and without pruning."""
    from mcap.core.capture import meshsearch
    m = parse_mesh(mesh)
    cost = _random_cost(L, seed)
    want = _brute(L, m, cost)
    for name in meshsearch.names():
        searcher = meshsearch.get(name)
        for prune in (True, False):
            got = searcher.search(L, m, cost, prune=prune)
            assert got.plan == want, (name, prune)
            check_plan(got.plan, L, m)


def test_pipeline_only_mesh_search_is_mcaps_exact():
    stats = LayerStats((300, 120, 90, 400, 60, 80, 70, 200, 50, 40),
                       (None, 20, -5, 150, 3, 10, 12, 90, 8, 4))

    def cost(a, z, par, d):
        return stats.mem_isolated[a] + sum(stats.mem_added[a + 1:z + 1])
    got = exact_plan(10, Mesh(1, 4), cost, kinds=())
    want = recommend(stats, 4, "exact")
    assert got.plan.balance == want.balance and got.peaks == want.predicted_peaks


def test_log_fit_goes_through_both_profiled_degrees_and_flattens():
    assert log_degree(100, 70, 2) == 100 and log_degree(100, 70, 4) == 70
    assert log_degree(100, 70, 8) == 40 and log_degree(100, 70, 16) == 10
    assert log_degree(100, 70, 8) - log_degree(100, 70, 16) == 30  # linear in log2(degree)


def test_batch_line_through_two_profiled_sizes():
    assert batch_line(100, 8, 160, 16, 32) == 280
    assert batch_line(100, 8, 160, 16, 8) == 100
    with pytest.raises(McapError, match="two different batch sizes"):
        batch_line(1, 8, 2, 8, 16)


def test_layer_merger_merges_the_pair_with_the_lowest_merged_isolated_memory():
    iso, added = (10, 50, 20, 30, 5), (None, 4, 6, -2, 1)
    sizes, miso, madded = merge_layers(iso, added, 3)
    # round 1: merged Mi = 10+4, 50+6, 20-2, 30+1 -> layers 0,1 (14); round 2: 14+6, 20-2, 30+1
    # -> layers 2,3 (18); left: [0,1], 2..3, 4
    assert sizes == (2, 2, 1) and sum(sizes) == 5
    assert miso == (14, 18, 5) and madded == (None, 6 - 2, 1)
    # a merged model predicts a stage the way the unmerged one does
    assert miso[0] + madded[1] == iso[0] + sum(added[1:4])
    with pytest.raises(McapError, match="--merge-to 0: the model has 5 layers"):
        merge_layers(iso, added, 0)


def test_recommendation_on_a_2x4_mesh_is_fast():
    L = 30
    mesh = parse_mesh("2x4")
    cost = _random_cost(L, 7)
    started = time.process_time()  # CPU seconds of this process: not the machine's load
    dp = exact_plan(L, mesh, cost)
    assert time.process_time() - started < 5.0 and dp.plan.devices == 8
