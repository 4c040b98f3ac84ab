"""Rank agreement of two sweeps (issue 11 item 6) against scipy's definitions, ties included,
and the bundled figures against a recomputation from the sweeps when both are present."""

import numpy as np
import pytest

from mcap.core.errors import McapError
from mcap.core.evaluate import rank_agreement
from mcap.core.types import Run
from tests.conftest import REPO


def runs(peaks):
    return [Run((i + 1, 40 - i), "ok", (int(p), 1), 1.0) for i, p in enumerate(peaks)]


def test_matches_scipy_with_ties():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    x = rng.integers(2, 12, 30)
    y = x + rng.integers(0, 6, 30)
    r = rank_agreement(runs(x), runs(y), top=5)
    assert r.n == 30
    assert r.spearman == pytest.approx(stats.spearmanr(x, y).statistic)
    assert r.kendall == pytest.approx(stats.kendalltau(x, y).statistic)
    tied = y[x == x.min()]
    assert r.best_ties == len(tied)
    assert r.best_ranks == (int((y < tied.min()).sum()) + 1, int((y < tied.max()).sum()) + 1)
    assert r.best_ratios[1] == pytest.approx(tied.max() / y.min())


def test_identical_and_reversed_orders():
    r = rank_agreement(runs(range(10, 20)), runs(range(10, 20)))
    assert r.spearman == pytest.approx(1) and r.kendall == pytest.approx(1)
    assert (r.best_ranks, r.top_shared) == ((1, 1), 10)
    r = rank_agreement(runs(range(10, 20)), runs(range(20, 10, -1)))
    assert r.spearman == pytest.approx(-1) and r.best_ranks == (10, 10)


def test_needs_shared_partitionings():
    with pytest.raises(McapError, match="share 2 ok partitionings"):
        rank_agreement(runs([1, 2]), runs([1, 2]))


def test_bundled_figures_are_the_sweeps_own():
    root = REPO
    gpu = root.parent / "shared" / "gpu-h100" / "vgg11-h512-b8-h100x4-full.sweep.json"
    if not gpu.exists():
        pytest.skip("../shared/gpu-h100 is not beside the checkout")
    from mcap.io import agreement, jsonio
    saved = agreement.load(root / "data" / "vgg11-h512-b8-cpu-vs-h100.agreement.json")
    cpu = jsonio.load_sweep(root / "data" / "vgg11-h512-b8-cpu4-full.sweep.json")
    assert rank_agreement(cpu.runs, jsonio.load_sweep(gpu).runs) == saved["stats"]
