"""Property test: the exact DP equals exhaustive search, ties and negative mem_added included."""
import numpy as np
from hypothesis import given, settings, strategies as st

from mcap.core import partition
from mcap.core.predict import predict
from mcap.core.search import recommend
from mcap.core.search.tiebreak import key, make_band
from mcap.core.types import LayerStats


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
    L = stats.num_layers
    allb = [tuple(int(x) for x in b) for b in np.concatenate(list(partition.enumerate_all(L, G)))]
    preds = {b: predict(stats, b).peaks for b in allb}
    band = make_band(min(max(p) for p in preds.values()), tol)
    want = min(allb, key=lambda b: key(preds[b], b, band))
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
