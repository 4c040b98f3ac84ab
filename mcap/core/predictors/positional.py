"""Stages that are not the first: statistics read where such stages peak (issue 29).

mCAP reads mem_added(l) on the first stage's prefix windows ``0..l-1 / 0..l`` (3.1) and uses
it for a layer wherever it sits. That holds while a stage peaks at the same moment whatever
it holds. It does not when the first and the last stage peak somewhere else than the
others (bench/log/2026-11-26-gpt2-blocks.md; ``hf:gpt2:n_embd=256,n_head=4,seq=256``,
4 stages):

* a **first** stage with the 50k-token embedding peaks in the embedding's backward (its
  dense gradient), after the blocks' activations are gone: a block there adds 20.04 MiB
  while the stage holds up to four blocks, 31.05 MiB after (the blocks' own peak wins);
* a **middle** stage of blocks peaks inside the blocks: each adds 31.05 MiB, so every middle
  stage holding blocks 1..4 was predicted 11 MiB per such block low (25% at 3 blocks);
* a **last** stage with the head peaks in the head's loss (its logits): each block in front
  of it adds only 17.03 MiB, so last stages were predicted up to 14 MiB per block high.

The profile already measures both kinds of stage: its runs ``(k, 1, x, y)`` hold the middle
windows ``k+1 .. k+x`` and the last windows ``k+x+1 .. L-1``. This module reads from them:

* **middle stages** ``a..z`` (``0 < a < z < L-1``): ``mem_isolated(a)`` plus, per layer after
  ``a``, its mem_added where that was read on a stage that is not the first, else ``c`` of
  its group (one kind and one parameter size), fitted by least squares on the held-out
  middle windows;
* **last stages** ``a..L-1`` (``a > 0``): mem_added mirrored (read from the right): the
  measured window where there is one, else the nearest measured last window ``s..L-1``
  plus, for each layer ``a..s-1`` put in front, the median of the measured fronts
  ``PM(l..L-1) - PM(l+1..L-1)`` of its group, where the profile read two or more fronts of
  that group and they agree within 1% (else the predictor's own value: one reading cannot
  be checked, and a group whose fronts differ is not one cost).

First stages keep the predictor's own costs (the statistics are read there). Each part is
kept only if its leave-one-out error over its windows (each predicted without its own
reading) is at least 10% below Listing 1.1's error there, the bar every other term meets
(the predictor's own terms were fitted on those held-out windows, so its error there is
in-sample; Listing 1.1 reads nothing from them); it needs layer kinds. Nothing is read
from a sweep.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from mcap.core.costs import StageCosts
from mcap.core.predictors.base import Windows
from mcap.core.predictors.maxparam import costs_of

KEEP_IF_BETTER_BY = 0.10
AGREE = 0.01  # a group's fronts must agree within 1% of their median to stand for unmeasured ones


def group(layer) -> str:
    """Layers that are alike: one kind and one parameter size (VGG11's convolutions are one
    kind of many sizes; GPT-2's blocks are one group)."""
    return f"{layer.kind}/{layer.param_bytes}"
MIDDLE = "middle stages: cost per layer behind their first, per kind"
LAST = "last stages: cost per layer put in front, per kind"


class PositionalCosts(StageCosts):
    """``inner`` for first stages (and where a part was not kept); middle and last stages of
    two or more layers from the arrays fitted below (module docstring)."""

    def __init__(self, inner: StageCosts, iso: Optional[np.ndarray], mid_prefix: Optional[np.ndarray],
                 last: Optional[np.ndarray], details: dict):
        self.inner = inner
        self.num_layers = inner.num_layers
        self.predictor = inner.predictor
        self.table = None
        self.details = {**inner.details, **details}
        self.iso, self.mid_prefix, self.last = iso, mid_prefix, last

    def stage_costs(self, first, last):
        first, last = np.asarray(first), np.asarray(last)
        out = np.array(self.inner.stage_costs(first, last), dtype=np.int64, copy=True)
        L = self.num_layers
        if self.mid_prefix is not None:
            sel = (first > 0) & (last > first) & (last < L - 1)
            out[sel] = self.iso[first[sel]] + self.mid_prefix[last[sel] + 1] - self.mid_prefix[first[sel] + 1]
        if self.last is not None:
            sel = (first > 0) & (last > first) & (last == L - 1)
            out[sel] = self.last[first[sel]]
        return out


def with_positions(costs: StageCosts, profile, wins: Windows) -> StageCosts:
    """``costs`` with its middle and last stages read where they peak, where the profile's
    windows support it (module docstring); else ``costs`` itself."""
    layers = profile.model.layers
    if not wins.complete or not wins.runs or not all(l.kind for l in layers) or wins.L < 4:
        return costs
    measured = {(int(a), int(z)): int(p) for a, z, p in zip(wins.first, wins.last, wins.peaks)}
    paper = wins.score(())
    if paper is None:
        return costs
    added = [0] + [a or 0 for a in paper.stats.mem_added[1:]]
    on_first = [False] + [bool(wins.add_has[l]) and int(wins.first[wins.add_lo[l]]) == 0
                          for l in range(1, wins.L)]
    details: dict = {}
    # The bar: Listing 1.1's error on the same windows. The predictor's own terms were fitted
    # on these held-out windows (its middle term, its per-layer max term), so its error there
    # is in-sample; Listing 1.1 reads nothing from them, as a left-out window reads nothing.
    plain = costs_of(paper, "paper")
    mid = _middle(layers, wins, plain, measured, added, on_first)
    last = _last(layers, wins, plain, costs, measured)
    if mid is None and last is None:
        return costs
    iso = mid_prefix = None
    if mid is not None:
        iso, mid_prefix, per_kind = mid
        details[MIDDLE] = per_kind
    last_costs = None
    if last is not None:
        last_costs, per_kind = last
        details[LAST] = per_kind
    return PositionalCosts(costs, iso, mid_prefix, last_costs, details)


def _better(loo: np.ndarray, before: np.ndarray) -> bool:
    return before.sum() > 0 and loo.sum() <= (1 - KEEP_IF_BETTER_BY) * before.sum()


def _middle(layers, wins: Windows, costs: StageCosts, measured: dict, added, on_first):
    L = wins.L
    iso = np.zeros(L, dtype=np.int64)
    for l in range(L):
        if (l, l) not in measured:
            return None
        iso[l] = measured[(l, l)]
    held = [(int(wins.first[i]), int(wins.last[i])) for i in wins.held]
    windows = [(a, z) for a, z in held if 0 < a < z < L - 1]
    kinds = sorted({group(layers[l]) for a, z in windows for l in range(a + 1, z + 1) if on_first[l]})
    if not kinds:
        return None
    col = {k: i for i, k in enumerate(kinds)}
    X = np.zeros((len(windows), len(kinds)))
    y = np.zeros(len(windows))
    for r, (a, z) in enumerate(windows):
        y[r] = measured[(a, z)] - iso[a]
        for l in range(a + 1, z + 1):
            if on_first[l]:
                X[r, col[group(layers[l])]] += 1
            else:
                y[r] -= added[l]
    meas = np.asarray([measured[w] for w in windows], dtype=float)
    before = np.abs(costs.stage_costs(np.asarray([a for a, _ in windows]),
                                      np.asarray([z for _, z in windows])) - meas)
    loo = before.copy()
    for r in range(len(windows)):
        keep = np.arange(len(windows)) != r
        if not X[r].any():
            loo[r] = abs(y[r])  # no fitted layer: the statistics alone
            continue
        if np.linalg.matrix_rank(X[keep][:, X[r] > 0]) < int((X[r] > 0).sum()):
            return None  # a window alone decides a kind: nothing to check it on
        c, *_ = np.linalg.lstsq(X[keep], y[keep], rcond=None)
        loo[r] = abs(X[r] @ c - y[r])
    if not _better(loo, before):
        return None
    c, *_ = np.linalg.lstsq(X, y, rcond=None)
    per_kind = {k: int(round(v)) for k, v in zip(kinds, c)}
    values = [per_kind[group(layers[l])] if on_first[l] and group(layers[l]) in per_kind else added[l]
              for l in range(L)]
    values[0] = 0
    prefix = np.concatenate([[0], np.cumsum(np.asarray(values, dtype=np.int64))])
    return iso, prefix, per_kind


def _last(layers, wins: Windows, plain: StageCosts, costs: StageCosts, measured: dict):
    L = wins.L
    starts = sorted(a for (a, z) in measured if z == L - 1 and a > 0)
    if len(starts) < 3:
        return None
    fronts = {a: measured[(a, L - 1)] - measured[(a + 1, L - 1)] for a in starts if a + 1 in starts}
    by_kind: dict[str, list[int]] = {}
    for a, v in fronts.items():
        by_kind.setdefault(group(layers[a]), []).append(v)
    # leave one out: each measured last window of 2+ layers from the next one and the
    # median front of its first layer's kind read without it
    held = {(int(wins.first[i]), int(wins.last[i])) for i in wins.held}
    check = [a for a in fronts if a < L - 1 and (a, L - 1) in held]
    if not check:
        return None
    before, loo = [], []
    for a in check:
        meas = measured[(a, L - 1)]
        before.append(abs(int(plain.stage(a, L - 1)) - meas))
        others = [v for b, v in fronts.items() if b != a and group(layers[b]) == group(layers[a])]
        loo.append(abs(measured[(a + 1, L - 1)] + int(np.median(others)) - meas) if others
                   else before[-1])
    if not _better(np.asarray(loo, float), np.asarray(before, float)):
        return None
    per_kind = {k: int(np.median(v)) for k, v in by_kind.items()
                if len(v) >= 2 and max(v) - min(v) <= AGREE * max(abs(float(np.median(v))), 1.0)}
    if not per_kind:
        return None
    out = np.asarray(costs.stage_costs(np.arange(L), np.full(L, L - 1)), dtype=np.int64)
    for a in range(L - 1, 0, -1):
        if (a, L - 1) in measured:
            out[a] = measured[(a, L - 1)]
            continue
        nxt = next((s for s in starts if s > a), None)
        kinds = [group(layers[l]) for l in range(a, nxt)] if nxt is not None else [None]
        if nxt is None or any(k not in per_kind for k in kinds):
            continue  # a layer of a kind no front was read for: keep the predictor's
        out[a] = measured[(nxt, L - 1)] + sum(per_kind[k] for k in kinds)
    return out, per_kind
