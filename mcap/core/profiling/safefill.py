"""Balances that hold given windows as stages while avoiding windows known to run out of
memory (profiling under a capacity, mCAP 3.5: "if some configurations run out of memory, a
different set is chosen"). Pure: no torch, no files.

``mcap.core.profiling.replanning.replan`` places the windows a missing statistic needs into a run
and spreads the other layers evenly; under a tight capacity that even spread often lands a
window proven over the capacity (``mcap.core.profiling.stats.over_capacity_windows``) on some
stage, and the run would only fail again. Here the other layers are split so that no
stage contains such a window, with the longest free stage as short as possible (the
runs that failed were the unbalanced ones). Candidates come best first.
"""
from __future__ import annotations

from itertools import combinations_with_replacement, product
from typing import Iterator, Sequence

from mcap.core.profiling.stats import doomed

Window = tuple[int, int]

# Allocations of spare stages to gaps tried at most (their number grows as C(spare+gaps-1,
# gaps-1); the few windows a fallback run holds keep it small in practice).
MAX_ALLOCATIONS = 2000


def _split(first: int, n: int, k: int, over) -> list[int] | None:
    """Layers first..first+n-1 in k stages, no stage holding an over window, the longest
    stage as short as possible (DP over cut points); None when impossible."""
    if k == 0:
        return [] if n == 0 else None
    if k > n:
        return None
    INF = n + 1
    # best[j][i]: the least longest stage of the first i layers in j stages.
    best = [[INF] * (n + 1) for _ in range(k + 1)]
    cut = [[-1] * (n + 1) for _ in range(k + 1)]
    best[0][0] = 0
    for j in range(1, k + 1):
        for i in range(j, n + 1):
            for p in range(j - 1, i):
                if best[j - 1][p] >= INF or doomed((first + p, first + i - 1), over):
                    continue
                v = max(best[j - 1][p], i - p)
                if v < best[j][i]:
                    best[j][i], cut[j][i] = v, p
    if best[k][n] >= INF:
        return None
    sizes, i = [], n
    for j in range(k, 0, -1):
        p = cut[j][i]
        sizes.append(i - p)
        i = p
    return sizes[::-1]


# Splits of one gap enumerated at most beyond the DP's optimum (alternatives for when the
# best fill was already tried), and how many of each gap are combined.
MAX_SPLITS = 2000
TOP_SPLITS = 6


def _splits(first: int, n: int, k: int, over) -> list[list[int]]:
    """The DP's best split of the gap, then other splits avoiding over windows, best first
    (shortest longest stage, then the fewest layers on it), at most TOP_SPLITS."""
    best = _split(first, n, k, over)
    if best is None:
        return []
    out, found = [best], []

    def walk(pos: int, left: int, acc: list[int]) -> None:
        if len(found) >= MAX_SPLITS:
            return
        if left == 1:
            if not doomed((first + pos, first + n - 1), over):
                found.append(acc + [n - pos])
            return
        for size in range(1, n - pos - left + 2):
            if doomed((first + pos, first + pos + size - 1), over):
                break  # longer stages from here contain it too
            walk(pos + size, left - 1, acc + [size])

    if k > 0:
        walk(0, k, [])
    found.sort(key=lambda p: (max(p), sorted(p, reverse=True), p))
    for p in found:
        if p != best:
            out.append(p)
        if len(out) >= TOP_SPLITS:
            break
    return out


def fills(first: int, last: int, stages: int, wins: Sequence[Window],
          over) -> Iterator[tuple[int, ...]]:
    """Stage sizes for layers first..last in ``stages`` stages holding every window of
    ``wins`` as a stage (disjoint, inside first..last) and no stage containing a window of
    ``over``; best first (the shortest longest free stage, then the fewest layers on it)."""
    ws = sorted(wins)
    if any(doomed(w, over) for w in ws):
        return
    gaps, pos = [], first
    for a, z in ws:
        gaps.append((pos, a - pos))
        pos = z + 1
    gaps.append((pos, last + 1 - pos))
    base = [1 if n > 0 else 0 for _, n in gaps]
    spare = stages - len(ws) - sum(base)
    if spare < 0:
        return
    found = {}
    for tried, extra in enumerate(combinations_with_replacement(range(len(gaps)), spare)):
        if tried >= MAX_ALLOCATIONS:
            break
        alloc = list(base)
        for g in extra:
            alloc[g] += 1
        options = [_splits(s, n, k, over) if k else ([[]] if n == 0 else []) for (s, n), k in zip(gaps, alloc)]
        if any(not o for o in options):
            continue
        for parts in product(*options):
            sizes: list[int] = []
            for i, p in enumerate(parts):
                sizes.extend(p)
                if i < len(ws):
                    sizes.append(ws[i][1] - ws[i][0] + 1)
            free = [x for p in parts for x in p] or [0]
            found[tuple(sizes)] = (max(free), sorted(free, reverse=True))
    for sizes in sorted(found, key=lambda b: (found[b], b)):
        yield sizes


def feasible(num_layers: int, stages: int, over, limit: int) -> list[tuple[int, ...]] | None:
    """Every ``stages``-stage balance of ``num_layers`` layers with no stage containing a
    window of ``over``, in lexicographic order; None when there are more than ``limit``
    (a depth-first walk that stops at a stage holding an over window: a longer stage
    from the same first layer holds it too)."""
    out: list[tuple[int, ...]] = []

    def walk(pos: int, left: int, acc: list[int]) -> bool:
        if left == 1:
            if not doomed((pos, num_layers - 1), over):
                out.append(tuple(acc + [num_layers - pos]))
            return len(out) <= limit
        for size in range(1, num_layers - pos - left + 2):
            if doomed((pos, pos + size - 1), over):
                break
            if not walk(pos + size, left - 1, acc + [size]):
                return False
        return True

    return out if walk(0, stages, []) else None
