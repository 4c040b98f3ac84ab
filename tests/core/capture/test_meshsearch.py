"""CAPTURE's mesh search (``mcap.core.capture.meshsearch``, CAPTURE III-C): Algorithm 4 and the
exact DP find the plan of lowest sorted per-device peaks (a brute force over every plan says
which), every registered mesh search does, pipeline-only is mCAP's exact, and a 2x4 mesh is
searched fast. Plan text and placement rules: test_plan.py."""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from mcap.core.errors import InvalidPartitioning
from mcap.core.capture.plan import HybridPlan, Mesh, StageConfig, check_plan, parse_mesh
from mcap.core.capture.meshsearch import configs, enumerate_plans, exact_plan
from mcap.core.recommend import recommend
from mcap.core.types import LayerStats


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


def test_recommendation_on_a_2x4_mesh_is_fast():
    L = 30
    mesh = parse_mesh("2x4")
    cost = _random_cost(L, 7)
    started = time.process_time()  # CPU seconds of this process: not the machine's load
    dp = exact_plan(L, mesh, cost)
    assert time.process_time() - started < 5.0 and dp.plan.devices == 8
