"""Property test: the exact DP equals exhaustive search, ties and negative mem_added included."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from mcap.core.errors import McapError
from mcap.core.search import exact
from mcap.core.search import recommend
from mcap.core.search.tiebreak import key
from mcap.core.types import LayerStats
from tests.conftest import all_balances, exhaustive


@st.composite
def cases(draw):
    L = draw(st.integers(1, 10))
    G = draw(st.integers(1, L))
    width = draw(st.sampled_from([3, 20, 10_000]))  # small widths force many ties
    iso = draw(st.lists(st.integers(1, width), min_size=L, max_size=L))
    added = draw(st.lists(st.integers(-width, width), min_size=L, max_size=L))
    tol = draw(st.sampled_from([0.0, 0.0, 0.05, 0.3]))
    return LayerStats(tuple(iso), (None,) + tuple(added[1:])), G, tol


@settings(max_examples=300, deadline=None)
@given(cases())
def test_exact_equals_exhaustive(case):
    stats, G, tol = case
    want, _ = exhaustive(stats, G, tol)
    got = recommend(stats, G, "exact", tie_tolerance=tol)
    assert got.balance == want
    got_bf = recommend(stats, G, "bf", tie_tolerance=tol)
    assert got_bf.balance == want


def test_exact_is_fast_enough_smoke():
    rng = np.random.default_rng(0)
    L = 200
    stats = LayerStats(tuple(int(x) for x in rng.integers(1, 10**9, L)),
                       (None,) + tuple(int(x) for x in rng.integers(-10**8, 10**9, L - 1)))
    rec = recommend(stats, 16, "exact")
    assert sum(rec.balance) == L and len(rec.balance) == 16


def _reference(C, L, G):
    """The DP of exact.py's docstring in plain Python: best (sorted vector, balance) per prefix."""
    best = {(1, j): ((int(C[0, j]),), (j,)) for j in range(1, L + 1)}
    for g in range(2, G + 1):
        for j in range(g, L + 1):
            cands = []
            for i in range(g - 1, j):
                if (g - 1, i) in best:
                    vec, bal = best[(g - 1, i)]
                    cands.append((tuple(sorted(vec + (int(C[i, j]),), reverse=True)), bal + (j - i,)))
            best[(g, j)] = min(cands)
    return best[(G, L)][1]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(12, 40), st.sampled_from([1, 2, 5, 10**6]))
def test_solve_matrix_takes_any_costs(seed, L, width):
    # Non-additive costs with many ties (width 1: every partitioning ties, so the balance
    # decides among up to L candidates per end; deep vectors exercise the tournament).
    rng = np.random.default_rng(seed)
    G = int(rng.integers(1, min(L, 12) + 1))
    C = rng.integers(-width, width + 1, size=(L, L + 1)) * 1000
    assert exact.solve_matrix(C, G)[0] == _reference(C, L, G)


def test_solve_matrix_equals_exhaustive_on_non_additive_costs():
    rng = np.random.default_rng(3)
    for L, G in [(9, 3), (10, 4), (8, 8), (7, 1)]:
        C = rng.integers(0, 4, size=(L, L + 1))
        allb = all_balances(L, G)

        def peaks(b):
            edges = np.cumsum((0,) + b)
            return [int(C[a, e]) for a, e in zip(edges[:-1], edges[1:])]
        want = min(allb, key=lambda b: key(peaks(b), b))
        assert exact.solve_matrix(C, G)[0] == want


def test_solve_matrix_rejects_bad_input():
    C = np.zeros((5, 6), dtype=np.int64)
    with pytest.raises(McapError, match=r"shape \(L, L\+1\), got \(5, 5\)"):
        exact.solve_matrix(C[:, :5], 2)
    with pytest.raises(McapError, match="got 6"):
        exact.solve_matrix(C, 6)
    with pytest.raises(McapError, match="dtype float64"):
        exact.solve_matrix(C.astype(float), 2)
