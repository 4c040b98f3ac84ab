"""Partitioning and plan together (issue 16, 5): MPress starts where partitioning ends
(MPress I, II-D: a memory-balanced partitioning costs compute balance; a plan costs
time), so the joint search plans several good partitionings and keeps the fastest that
fits. Pure.

Candidates: the ``top`` partitionings with the lowest keep-all predicted peak (mCAP's
objective, 3.4) and the ``top`` with the lowest *floor* (``model.smallest_capacity``: the
least any plan can reach, so the partitionings most able to fit under a tight capacity),
from every partitioning when there are at most ``ENUMERATE`` of them, else from the exact
pick and every balance within ``RADIUS`` layers of each of its cuts. Each candidate that
can fit gets its plan (``method``); the answer is the one of least predicted added time,
ties broken by the lower predicted peak after the plan.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from mcap.core.errors import McapError
from mcap.core.partition import count, enumerate_all, windows_many
from mcap.core.press.model import smallest_capacity, window_floor_drop
from mcap.core.press.problems import Problem, check_profile, problem
from mcap.core.press.actions import PressPlan

ENUMERATE = 300_000
RADIUS = 2
# Candidates planned by each ranking (issue 28): each is one plan (an MILP by default), so
# the count is bounded; the default is 4.
MAX_TOP = 64


@dataclass(frozen=True)
class Candidate:
    balance: tuple[int, ...]
    peak_before: int               # keep-all predicted peak
    floor: int                     # smallest capacity any plan meets
    added_seconds: Optional[float]  # None: no plan fits


@dataclass(frozen=True)
class Joint:
    plan: PressPlan
    peaks_before: tuple[int, ...]
    candidates: tuple[Candidate, ...]


def _floors(balances: np.ndarray, costs, profile) -> tuple[np.ndarray, np.ndarray]:
    """(keep-all peak, floor) of every balance ((m, G) balances): each stage's keep-all
    peak less what swapping all its layers saves (``model.window_floor_drop``, the exact
    floor of ``model.floor_actions``), computed once per distinct window."""
    first, last = windows_many(balances)
    peaks = costs.stage_costs(first, last)
    G = balances.shape[1]
    st, press = profile.setup, profile.press
    params = [layer.param_bytes for layer in profile.model.layers]
    drop = np.zeros_like(peaks)
    cache: dict = {}
    for (i, s), a in np.ndenumerate(first):
        z = int(last[i, s])
        key = (int(a), z, s if st.schedule == "1f1b" else s == G - 1)
        if key not in cache:
            cache[key] = window_floor_drop(st.schedule, st.chunks, s, G, int(a), z,
                                           press.saved_bytes, press.backward_bytes, params,
                                           press.shared, press.boundaries,
                                           press.backward_transients,
                                           press.forward_transients)
        drop[i, s] = cache[key]
    return peaks.max(axis=1), (peaks - drop).max(axis=1)


def _pool(profile, G: int, costs) -> np.ndarray:
    L = profile.model.num_layers
    if count(L, G) <= ENUMERATE:
        return np.concatenate(list(enumerate_all(L, G)))
    from mcap.core.recommend import recommend
    pick = recommend(costs, G, "exact").balance
    cuts = np.cumsum(pick)[:-1]
    out = set()
    for shift in itertools.product(range(-RADIUS, RADIUS + 1), repeat=G - 1):
        c = cuts + np.asarray(shift)
        if np.all(np.diff(np.concatenate([[0], c, [L]])) > 0):
            out.add(tuple(np.diff(np.concatenate([[0], c, [L]])).tolist()))
    return np.asarray(sorted(out), dtype=np.int64)


def joint(profile, stages: int, capacity: int, method: str = "milp",
          predictor: Optional[str] = None, top: int = 4) -> Joint:
    """The fastest partitioning + plan under ``capacity`` (module docstring)."""
    from mcap.core.press.base import solve
    from mcap.core.recommend import check_stages, costs_of
    check_stages(stages, profile.model.num_layers)
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise McapError(f"the candidates planned (--press-candidates) must be 1..{MAX_TOP}, "
                        f"got {top!r}")
    check_profile(profile)
    costs = costs_of(profile, predictor)
    pool = _pool(profile, stages, costs)
    peak, floor = _floors(pool, costs, profile)
    picks = list(dict.fromkeys(
        [tuple(int(x) for x in pool[i]) for i in np.lexsort((floor, peak))[:top]]
        + [tuple(int(x) for x in pool[i]) for i in np.lexsort((peak, floor))[:top]]))
    cands, best = [], None
    for bal in picks:
        p: Problem = problem(profile, bal, capacity, predictor)
        least = smallest_capacity(p)
        if least > capacity:
            cands.append(Candidate(bal, max(p.base), least, None))
            continue
        plan = solve(p, capacity, method)
        cands.append(Candidate(bal, max(p.base), least, plan.predicted_added_seconds))
        key = (round(plan.predicted_added_seconds, 9), max(plan.predicted_peaks))
        if best is None or key < best[0]:
            best = (key, plan, p.base)
    if best is None:
        least = int(floor.min())
        raise McapError(f"no partitioning of {profile.model.num_layers} layers over {stages} "
                        f"stages with any plan fits capacity {capacity:,} bytes: the smallest "
                        f"capacity that can be met is {least:,} bytes (balance "
                        f"{','.join(map(str, pool[int(floor.argmin())]))}, every layer's "
                        f"activations swapped out)")
    return Joint(best[1], tuple(best[2]), tuple(cands))


def floor_of(profile, stages: int, predictor: Optional[str] = None) -> tuple[int, int]:
    """(lowest keep-all peak, lowest floor) over the partitionings ``joint`` considers:
    the capacities under which partitioning alone, and partitioning + a plan, can fit."""
    from mcap.core.recommend import costs_of
    check_profile(profile)
    costs = costs_of(profile, predictor)
    pool = _pool(profile, stages, costs)
    peak, floor = _floors(pool, costs, profile)
    return int(peak.min()), int(floor.min())
