"""Partitionings: validation, parsing, counting and enumeration (pure; no torch, no files).

A partitioning of L layers over G stages is a composition of L into G positive parts,
torchgpipe's ``balance``. There are C(L-1, G-1) of them (mCAP 3.4, P_all): choose G-1
cut points among the L-1 gaps between layers.
"""
from __future__ import annotations

import math
from typing import Iterator, Sequence

import numpy as np

from mcap.core import numbers
from mcap.core.errors import InvalidPartitioning
from mcap.core.types import Partitioning


def _check_counts(num_layers: int, stages: int) -> None:
    if not isinstance(stages, (int, np.integer)) or isinstance(stages, bool) or stages < 1:
        raise InvalidPartitioning(f"stages must be an integer >= 1, got {stages!r}")
    if not isinstance(num_layers, (int, np.integer)) or isinstance(num_layers, bool) or num_layers < 1:
        raise InvalidPartitioning(f"the model must have at least 1 layer, got {num_layers!r}")
    if stages > num_layers:
        raise InvalidPartitioning(
            f"{stages} stages but the model has only {num_layers} layers; every stage needs at least one")


def validate(balance: Sequence[int], num_layers: int) -> Partitioning:
    """Return ``balance`` as a Partitioning of ``num_layers`` layers, or raise naming the values."""
    try:
        bal = tuple(balance)
    except TypeError:
        raise InvalidPartitioning(f"balance must be a sequence of layer counts, got {balance!r}") from None
    if len(bal) < 1:
        raise InvalidPartitioning("balance is empty: a partitioning needs at least 1 stage (G >= 1)")
    for i, n in enumerate(bal):
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
            raise InvalidPartitioning(f"balance entry {i} is {n!r}, not an integer layer count")
        if n <= 0:
            raise InvalidPartitioning(
                f"balance {','.join(map(str, bal))} has {n} layers on stage {i}; every stage needs at least one")
    if len(bal) > num_layers:
        raise InvalidPartitioning(
            f"balance {','.join(map(str, bal))} has {len(bal)} stages but the model has only {num_layers} layers")
    total = sum(int(n) for n in bal)
    if total != num_layers:
        raise InvalidPartitioning(
            f"balance {','.join(map(str, bal))} sums to {total} but the model has {num_layers} layers")
    return Partitioning(tuple(int(n) for n in bal))


def windows(balance: Sequence[int]) -> tuple[tuple[int, int], ...]:
    """(first, last) layer of each stage, inclusive: the one balance -> windows function.

    A stage holding layers a..z measures the *window* PM(a..z) (mCAP 3.1)."""
    return Partitioning(tuple(int(n) for n in balance)).bounds()


def windows_many(balances: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(m, G) balances -> (first, last) arrays of shape (m, G): the vectorised ``windows``."""
    arr = np.asarray(balances, dtype=np.int64)
    last = np.cumsum(arr, axis=1) - 1
    return last - arr + 1, last


def parse_balance(text: str) -> tuple[int, ...]:
    """Parse "3,3,5,19" (spaces allowed) into (3, 3, 5, 19); does not check the sum."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(p == "" for p in parts):
        raise InvalidPartitioning(f"balance {_shown(text)} is not a comma-separated list of "
                                  "layer counts like 3,3,5,19")
    out = tuple(numbers.whole(p) for p in parts)  # ASCII digits only ("٣" is not 3)
    if None in out:
        raise InvalidPartitioning(f"balance {_shown(text)} is not a comma-separated list of "
                                  "layer counts in ASCII digits like 3,3,5,19")
    for i, n in enumerate(out):
        if n <= 0:
            raise InvalidPartitioning(f"balance {_shown(text)} has {n} layers on stage {i}; every "
                                      "stage needs at least one")
    return out


def _shown(text) -> str:
    text = repr(str(text))
    return text if len(text) <= 80 else f"{text[:60]}...' ({len(text):,} characters)"


def count(num_layers: int, stages: int) -> int:
    """Number of partitionings, C(L-1, G-1) (mCAP 3.4)."""
    _check_counts(num_layers, stages)
    return math.comb(num_layers - 1, stages - 1)


def cuts_to_balances(cuts: np.ndarray, num_layers: int) -> np.ndarray:
    """(m, G-1) strictly increasing cut points in 1..L-1 -> (m, G) balances."""
    m = cuts.shape[0]
    edges = np.empty((m, cuts.shape[1] + 2), dtype=np.int64)
    edges[:, 0] = 0
    edges[:, 1:-1] = cuts
    edges[:, -1] = num_layers
    return np.diff(edges, axis=1)


def _colex_combinations(n: int, k: int) -> np.ndarray:
    """All k-subsets of range(n) in colexicographic order, shape (C(n,k), k), ascending rows.

    In colex order the subsets of range(n') for n' < n are exactly the first C(n',k)
    rows, which lets a prefix reuse one table for every suffix range (see iter_cut_chunks).
    """
    if k == 0:
        return np.zeros((1, 0), dtype=np.int64)
    rows = []
    # Build by the last (largest) element: for last = k-1..n-1, prepend combos of range(last).
    prev = _colex_combinations_small(k - 1, n)
    for last in range(k - 1, n):
        head = prev[: math.comb(last, k - 1)]
        block = np.empty((head.shape[0], k), dtype=np.int64)
        block[:, :-1] = head
        block[:, -1] = last
        rows.append(block)
    return np.concatenate(rows) if rows else np.zeros((0, k), dtype=np.int64)


_TABLES: dict[tuple[int, int], np.ndarray] = {}


def _colex_combinations_small(k: int, n: int) -> np.ndarray:
    key = (n, k)
    if key not in _TABLES:
        _TABLES[key] = _colex_combinations(n, k)
    return _TABLES[key]


def _suffix_width(num_layers: int, ncuts: int, target: int) -> int:
    """How many trailing cuts to vectorise so one chunk holds about ``target`` candidates."""
    k = 0
    while k < ncuts and math.comb(num_layers - 1, k + 1) <= target:
        k += 1
    return max(k, min(ncuts, 1))


def iter_cut_chunks(num_layers: int, stages: int, chunk: int = 1 << 18) -> Iterator[np.ndarray]:
    """Stream every partitioning as chunks of cut points, shape (m, G-1); never all at once.

    The leading G-1-k cuts are walked in Python, the trailing k are one slice of a colex
    table of k-subsets, offset past the last leading cut. Memory is O(chunk * G).
    """
    _check_counts(num_layers, stages)
    ncuts = stages - 1
    if ncuts == 0:
        yield np.zeros((1, 0), dtype=np.int64)
        return
    k = _suffix_width(num_layers, ncuts, chunk)
    table = _colex_combinations_small(k, num_layers - 1)  # subsets of gaps 0..L-2
    lead = ncuts - k
    import itertools

    for prefix in itertools.combinations(range(1, num_layers), lead):
        start = prefix[-1] + 1 if prefix else 1  # next free cut position
        avail = num_layers - start  # positions start..L-1
        n = math.comb(avail, k)
        if n == 0:
            continue
        tail = table[:n] + start
        if lead:
            out = np.empty((n, ncuts), dtype=np.int64)
            out[:, :lead] = prefix
            out[:, lead:] = tail
        else:
            out = tail
        yield out


def enumerate_all(num_layers: int, stages: int, chunk: int = 1 << 18) -> Iterator[np.ndarray]:
    """Stream every balance as (m, G) int64 chunks; the union is all C(L-1, G-1) of them."""
    for cuts in iter_cut_chunks(num_layers, stages, chunk):
        yield cuts_to_balances(cuts, num_layers)


def balance_from_cuts(cuts: Sequence[int], num_layers: int) -> tuple[int, ...]:
    edges = (0, *sorted(int(c) for c in cuts), num_layers)
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def random_partitionings(num_layers: int, stages: int, n: int, seed: int = 0) -> list[tuple[int, ...]]:
    """``n`` distinct partitionings drawn uniformly (without replacement), reproducible by ``seed``.

    Uniform over compositions = uniform (G-1)-subsets of the L-1 gaps. Asking for more
    than exist returns all of them (in random order).
    """
    total = count(num_layers, stages)
    if n < 0:
        raise InvalidPartitioning(f"cannot draw {n} partitionings")
    rng = np.random.default_rng(seed)
    n = min(n, total)
    if n == 0:
        return []
    if total <= 4 * n and total <= 2_000_000:
        allb = np.concatenate(list(enumerate_all(num_layers, stages)))
        idx = rng.permutation(total)[:n]
        return [tuple(int(x) for x in allb[i]) for i in idx]
    seen: set[tuple[int, ...]] = set()
    out = []
    gaps = np.arange(1, num_layers)
    while len(out) < n:
        cuts = np.sort(rng.choice(gaps, size=stages - 1, replace=False))
        bal = balance_from_cuts(cuts, num_layers)
        if bal not in seen:
            seen.add(bal)
            out.append(bal)
    return out
