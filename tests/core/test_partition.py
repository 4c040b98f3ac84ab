import itertools
import math

import numpy as np
import pytest

from mcap.core import partition
from mcap.core.errors import InvalidPartitioning, McapError


def test_validate_accepts_and_returns_partitioning():
    p = partition.validate([3, 3, 5, 19], 30)
    assert p.balance == (3, 3, 5, 19) and p.stages == 4
    assert p.bounds() == ((0, 2), (3, 5), (6, 10), (11, 29))


@pytest.mark.parametrize("balance,layers,needle", [
    ((3, 3, 5, 18), 30, "sums to 29 but the model has 30 layers"),
    ((3, 0, 27), 30, "0 layers on stage 1"),
    ((3, -1, 28), 30, "-1 layers on stage 1"),
    ((1, 1, 1), 2, "3 stages but the model has only 2 layers"),
    ((), 5, "G >= 1"),
])
def test_validate_rejects_with_values(balance, layers, needle):
    with pytest.raises(InvalidPartitioning) as exc:
        partition.validate(balance, layers)
    assert needle in str(exc.value)
    assert isinstance(exc.value, McapError)


def test_parse_balance():
    assert partition.parse_balance("3,3,5,19") == (3, 3, 5, 19)
    assert partition.parse_balance(" 4 , 26") == (4, 26)
    for bad in ("3,,4", "a,b", "", "3,0,2"):
        with pytest.raises(InvalidPartitioning):
            partition.parse_balance(bad)


def test_count_is_binomial_and_rejects_bad_g():
    assert partition.count(30, 4) == 3654  # VGG11 on 4 GPUs, mCAP 4.2
    assert partition.count(5, 1) == 1
    with pytest.raises(InvalidPartitioning, match="got 0"):
        partition.count(5, 0)
    with pytest.raises(InvalidPartitioning, match="6 stages"):
        partition.count(5, 6)


@pytest.mark.parametrize("L,G", [(1, 1), (6, 1), (6, 6), (7, 3), (12, 4), (30, 4), (13, 8)])
def test_enumerate_all_is_every_composition_once(L, G):
    got = np.concatenate(list(partition.enumerate_all(L, G, chunk=64)))
    want = {tuple(b - a for a, b in zip((0, *c), (*c, L)))
            for c in itertools.combinations(range(1, L), G - 1)}
    assert len(got) == len(want) == math.comb(L - 1, G - 1)
    assert set(map(tuple, got.tolist())) == want


def test_enumerate_all_streams_chunks():
    chunks = partition.enumerate_all(40, 5, chunk=1000)
    first = next(chunks)
    assert first.shape[1] == 5 and len(first) <= 1000 * 40


def test_random_partitionings_seeded_distinct_valid():
    a = partition.random_partitionings(30, 4, 50, seed=3)
    b = partition.random_partitionings(30, 4, 50, seed=3)
    c = partition.random_partitionings(30, 4, 50, seed=4)
    assert a == b and a != c
    assert len(set(a)) == 50
    assert all(sum(x) == 30 and len(x) == 4 and min(x) > 0 for x in a)
    assert len(partition.random_partitionings(6, 3, 100)) == 10  # only C(5,2) exist


def test_random_partitionings_roughly_uniform():
    # Every one of the 10 partitionings of (6, 3) is drawn equally often over seeds.
    counts = {}
    for s in range(400):
        (b,) = partition.random_partitionings(6, 3, 1, seed=s)
        counts[b] = counts.get(b, 0) + 1
    assert len(counts) == 10 and min(counts.values()) > 15
