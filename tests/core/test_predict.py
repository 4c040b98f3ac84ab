import math

import numpy as np
import pytest

from mcap.core import partition
from mcap.core.errors import InvalidPartitioning, InvalidStatistics
from mcap.core.predict import predict, predict_many
from mcap.core.types import LayerStats

STATS = LayerStats(mem_isolated=(10, 20, 30, 40, 50), mem_added=(None, 5, -3, 7, 11))


def listing_1_1(stats, balance):
    """The paper's loop, written out plainly."""
    peaks, start = [], 0
    for n in balance:
        layers = range(start, start + n)
        peak = stats.mem_isolated[layers[0]]
        for l in layers[1:]:
            peak += stats.mem_added[l]
        peaks.append(peak)
        start += n
    return tuple(peaks)


def test_predict_matches_listing():
    p = predict(STATS, (2, 3))
    assert p.peaks == (10 + 5, 30 + 7 + 11)
    assert p.peak == 48
    for G in (1, 2, 3, 5):  # any G, not only the profiled one
        for bal in np.concatenate(list(partition.enumerate_all(5, G))):
            assert predict(STATS, tuple(bal)).peaks == listing_1_1(STATS, tuple(bal))


def test_predict_many_equals_predict():
    bals = np.concatenate(list(partition.enumerate_all(5, 3)))
    many = predict_many(STATS, bals)
    assert many.shape == (len(bals), 3)
    for row, bal in zip(many, bals):
        assert tuple(row) == predict(STATS, tuple(bal)).peaks


def test_predict_rejects_bad_balance():
    with pytest.raises(InvalidPartitioning, match="sums to 4 but the model has 5"):
        predict(STATS, (2, 2))
    with pytest.raises(InvalidPartitioning, match="sums to 6 but the model has 5"):
        predict_many(STATS, [[1, 4], [3, 3]])


@pytest.mark.parametrize("iso,added,needle", [
    ((10, math.nan, 30), (None, 1, 1), "NaN for layers 1"),
    ((10, -2, 30), (None, 1, 1), "positive; layers 1"),
    ((10, 0, 30), (None, 1, 1), "positive; layers 1"),
    ((10, None, None), (None, 1, 1), "missing for layers 1, 2"),
    ((10, 20, 30), (None, None, 1), "mem_added is missing for layers 1"),
    ((10, 20, 30), (None, 1, math.nan), "mem_added is NaN for layers 2"),
    ((10, 20), (None, 1, 1), "2 entries but mem_added has 3"),
])
def test_invalid_statistics_name_layers(iso, added, needle):
    with pytest.raises(InvalidStatistics, match=needle):
        predict(LayerStats(mem_isolated=iso, mem_added=added), (1,) * len(iso))


def test_negative_mem_added_is_allowed():
    s = LayerStats(mem_isolated=(100, 100), mem_added=(None, -40))
    assert predict(s, (2,)).peaks == (60,)
