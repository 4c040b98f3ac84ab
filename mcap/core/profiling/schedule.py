"""Profiling plans: which partitionings to run so that every layer gets its statistics.

Pure: no torch, no files. A run's stage holding layers a..z measures the *window*
PM(a..z); ``mcap.core.profiling.stats`` turns windows into mem_isolated / mem_added (mCAP 3.1).

Scheme ``"mcap"`` (mCAP 3.1 (a)(b)(c), n kept small), for G >= 3:

* Base family R_k, k = 1..L-G+1: stage 0 = layers 0..k-1, stage 1 = layer k alone, the
  other layers over the remaining G-2 stages. Stage 0 gives the prefixes PM(0..k-1), so
  mem_added(1..L-G) with n = 0; stage 1 gives mem_isolated(1..L-G+1); R_{L-G+1} leaves
  layers L-G+2..L-1 alone on the last G-2 stages. These are the paper's L-G+1 runs.
* The last G-1 layers (L-G+1..L-1) cannot have a prefix window (a stage holds at most
  L-G+1 layers; the paper appended dummy layers instead, 3.5). Their windows n..l-1,
  n..l are placed in the *free part* (stages 2..G-1) of the R_k runs where possible:
  either one chain with a shared n = N (windows N..L-G, ..., N..L-1, each in its own run;
  the smallest N that fits is used) or pairs l-1..l (with the singleton l-1 already
  measured). Whatever does not fit goes into as few extra runs as possible. The option
  with the fewest runs wins; on a tie the smaller n. With G >= 4 and L >= 2G (every case
  measured) the plan has exactly L-G+1 runs; with G = 3 one more is unavoidable (see
  BENCHMARKS.md); ``bench/plan_runs.py`` prints the counts.
* G = 2: the runs (k, L-k), k = 1..L-1 (L-G+1 runs, the whole space). A middle layer can
  never be alone on one of two devices, so its mem_isolated is derived from the suffix
  window PM(k..L-1), under the assumption documented in ``mcap.core.profiling.stats`` (mem_added(L-1) = 0,
  exact for every 2-stage partitioning).

Scheme ``"capture"``: CAPTURE's Description 1 (003, III-A1), generalised to L not
divisible by G with q = L // G: for each moving stage s = 0..G-3, the stages before it
hold q layers, stage s holds j = 1..q+1 layers, the next two stages one layer each, and
the rest is spread evenly; then a run with the last two layers on the last stage. Any
statistic this leaves missing (L not divisible by G) is completed as ``replan`` does.

No plan contains a duplicate; every plan is checked for completeness before it is returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from mcap.core.profiling import safefill
from mcap.core.errors import McapError
from mcap.core.profiling.stats import (Sources, doomed, missing_for_windows, over_capacity_windows,
                             sources_for_windows, stage_windows)
from mcap.core.types import Run

SCHEMES = ("mcap", "capture")

Window = tuple[int, int]


@dataclass(frozen=True)
class Plan:
    """A profiling plan: the runs to make and which window each statistic is read from."""
    num_layers: int
    stages: int
    scheme: str
    runs: tuple[tuple[int, ...], ...]
    sources: Sources


def minimum_layers(stages: int, scheme: str = "mcap") -> int:
    """The fewest layers a scheme can profile on ``stages`` devices."""
    if scheme == "capture":
        return 2 * stages if stages >= 3 else 3
    return stages + 1


# --- placing windows inside runs ----------------------------------------------------

def _nz(n: int) -> int:
    return 1 if n > 0 else 0


def _fits(first: int, last: int, stages: int, wins: Sequence[Window]) -> bool:
    """Can layers first..last be cut into ``stages`` stages that include every window?"""
    ws = sorted(wins)
    gaps, pos = [], first
    for a, z in ws:
        if a < pos or z > last:
            return False
        gaps.append(a - pos)
        pos = z + 1
    gaps.append(last + 1 - pos)
    lo = len(ws) + sum(_nz(g) for g in gaps)
    hi = len(ws) + sum(gaps)
    return lo <= stages <= hi


def _even(n: int, parts: int) -> list[int]:
    q, r = divmod(n, parts)
    return [q + 1] * r + [q] * (parts - r)


def _materialise(first: int, last: int, stages: int, wins: Sequence[Window], shift: int = 0) -> list[int]:
    """Stage sizes for layers first..last holding ``wins`` as stages, gaps spread evenly.

    Extra stages go to the gaps with the most layers per stage; ``shift`` rotates which
    gaps get them, giving alternative fills when the first one is to be avoided.
    """
    ws = sorted(wins)
    gaps, pos = [], first
    for a, z in ws:
        gaps.append(a - pos)
        pos = z + 1
    gaps.append(last + 1 - pos)
    alloc = [_nz(g) for g in gaps]
    spare = stages - len(ws) - sum(alloc)
    order = list(range(len(gaps)))
    for _ in range(spare):
        cand = [i for i in order if alloc[i] < gaps[i]]
        cand.sort(key=lambda i: (-gaps[i] / alloc[i] if alloc[i] else 0, i))
        alloc[cand[shift % len(cand)] if shift else cand[0]] += 1
    out: list[int] = []
    for i, g in enumerate(gaps):
        if alloc[i]:
            out.extend(_even(g, alloc[i]))
        if i < len(ws):
            out.append(ws[i][1] - ws[i][0] + 1)
    return out


class _Slot:
    """A run under construction: fixed prefix stages plus a free region first..L-1."""

    def __init__(self, head: list[int], first: int, last: int, stages: int):
        self.head, self.first, self.last, self.stages = head, first, last, stages
        self.wins: list[Window] = []

    def can_take(self, w: Window) -> bool:
        if any(not (w[1] < a or z < w[0]) for a, z in self.wins):
            return False
        return _fits(self.first, self.last, self.stages, self.wins + [w])

    def balance(self, shift: int = 0) -> tuple[int, ...]:
        if self.stages == 0:
            return tuple(self.head)
        return tuple(self.head + _materialise(self.first, self.last, self.stages, self.wins, shift))


def _match(windows: Sequence[Window], slots: Sequence[_Slot]) -> dict[int, int]:
    """Bipartite matching (Kuhn) of windows to slots, at most one window per slot."""
    owner: dict[int, int] = {}
    # Later slots first: in R_k a larger k leaves a smaller free region, so the placed
    # window shares it with fewer layers and the run stays closer to even.
    options = [[j for j in reversed(range(len(slots))) if slots[j].can_take(windows[i])]
               for i in range(len(windows))]

    def augment(i: int, seen: set) -> bool:
        for j in options[i]:
            if j in seen:
                continue
            seen.add(j)
            if j not in owner or augment(owner[j], seen):
                owner[j] = i
                return True
        return False

    for i in sorted(range(len(windows)), key=lambda i: len(options[i])):
        augment(i, set())
    return {i: j for j, i in owner.items()}


def _pack_new(windows: Iterable[Window], num_layers: int, stages: int,
              max_stage: Optional[int] = None) -> list[_Slot]:
    """First-fit the windows into fresh whole-model runs; each run takes disjoint ones.

    With ``max_stage``, a window joins a run only if no stage of the filled run gets
    more layers than that (a run packed with many windows leaves big leftover stages,
    which may run out of memory); a window alone always gets its own run.
    """
    new: list[_Slot] = []

    def ok(s: _Slot, w: Window) -> bool:
        if not s.can_take(w):
            return False
        if max_stage is None:
            return True
        return max(_materialise(s.first, s.last, s.stages, s.wins + [w])) <= max_stage

    for w in sorted(windows, key=lambda w: (-(w[1] - w[0]), w)):
        for s in new:
            if ok(s, w):
                s.wins.append(w)
                break
        else:
            s = _Slot([], 0, num_layers - 1, stages)
            if not s.can_take(w):
                raise McapError(f"window of layers {w[0]}..{w[1]} cannot be a stage of a "
                                f"{stages}-stage partitioning of {num_layers} layers")
            s.wins.append(w)
            new.append(s)
    return new


# --- the mcap scheme -----------------------------------------------------------------

def _base_slots(L: int, G: int) -> list[_Slot]:
    K = L - G + 1
    return [_Slot([k, 1], k + 1, L - 1, G - 2) for k in range(1, K + 1)]


def _tail_option(L: int, G: int, needed: Sequence[Window]) -> list[tuple[int, ...]]:
    slots = _base_slots(L, G)
    free = slots[:-1]  # R_{L-G+1} is fully fixed (all singletons after stage 1)
    chain = [w for w in needed]
    matched = _match(chain, free)
    for i, j in matched.items():
        free[j].wins.append(chain[i])
    rest = [w for i, w in enumerate(chain) if i not in matched]
    # Unmatched windows may still share a base run with another (disjoint) one.
    still = []
    for w in rest:
        for s in reversed(free):
            if s.can_take(w):
                s.wins.append(w)
                break
        else:
            still.append(w)
    return [s.balance() for s in slots] + [s.balance() for s in _pack_new(still, L, G)]


def _mcap_runs(L: int, G: int) -> list[tuple[int, ...]]:
    if G == 2:
        return [(k, L - k) for k in range(1, L)]
    K = L - G + 1
    tail = range(K, L)  # layers without a prefix window
    options: list[tuple[int, int, list]] = []
    # (A) one chain with a shared n = N: windows N..K-1 (the b-window of layer K) .. N..L-1.
    for N in range(G - 1, K):
        needed = [(N, e) for e in range(K - 1, L) if e > N]
        runs = _tail_option(L, G, needed)
        options.append((len(set(runs)), N, runs))
        if len(set(runs)) == K:
            break
    # (B) pairs l-1..l; the b-window l-1..l-1 is already measured as a singleton.
    runs = _tail_option(L, G, [(l - 1, l) for l in tail])
    options.append((len(set(runs)), L, runs))
    options.sort(key=lambda o: (o[0], o[1]))
    return options[0][2]


# --- the capture scheme --------------------------------------------------------------

def _capture_runs(L: int, G: int) -> list[tuple[int, ...]]:
    if G == 2:  # Description 1 needs a moving stage plus two single-layer stages
        return _mcap_runs(L, G)
    q = L // G
    runs: list[tuple[int, ...]] = []
    for s in range(0, G - 2):
        for j in range(1, q + 2):
            head = [q] * s + [j, 1, 1]
            rest, rest_stages = L - sum(head), G - len(head)
            if rest < rest_stages or (rest_stages == 0 and rest != 0) or rest < 0:
                continue
            runs.append(tuple(head + (_even(rest, rest_stages) if rest_stages else [])))
    if L - 2 >= G - 1:  # line 15: the last two layers together on the last stage
        lead = _even(L - 2, G - 1)
        runs.append(tuple(lead + [2]))
    return runs


# --- public API ----------------------------------------------------------------------

# Refused above this many layers, before any work (issue 12): the plan search's time grows
# about as L^3, so a 10^6-layer profile would never finish (and once asked for L x L cells).
MAX_PLAN_LAYERS = 512


def _check(L: int, G: int, scheme: str) -> None:
    if scheme not in SCHEMES:
        raise McapError(f"unknown profiling scheme {scheme!r}; expected one of {', '.join(SCHEMES)}")
    if isinstance(G, bool) or not isinstance(G, int) or G < 1:
        raise McapError(f"stages must be an integer >= 1, got {G!r}")
    if isinstance(L, bool) or not isinstance(L, int) or L < 1:
        raise McapError(f"layers must be an integer >= 1, got {L!r}")
    if G == 1:
        raise McapError(f"profiling needs at least 2 stages: with 1 stage every run holds all {L} layers, "
                        f"so no layer can be measured alone")
    if L > MAX_PLAN_LAYERS:
        raise McapError(f"the profiling plan is limited to {MAX_PLAN_LAYERS} layers (its search "
                        f"grows about as L^3: 250 layers take seconds, 500 about a minute); "
                        f"the model has {L:,}")
    need = minimum_layers(G, scheme)
    if L < need:
        raise McapError(f"the {scheme} scheme needs at least {need} layers on {G} stages, "
                        f"the model has {L}")


def _finish(L: int, G: int, scheme: str, runs: Iterable[tuple[int, ...]]) -> Plan:
    seen, uniq = set(), []
    for r in runs:
        if r not in seen:
            seen.add(r)
            uniq.append(r)
    wins = {w for r in uniq for w in stage_windows(r)}
    missing = missing_for_windows(L, wins, G, derive=False)
    if missing:
        extra = replan(L, G, uniq, ())
        uniq.extend(extra)
        wins |= {w for r in extra for w in stage_windows(r)}
        missing = missing_for_windows(L, wins, G, derive=False)
    if missing:
        raise McapError(f"no {G}-stage plan for {L} layers gives {missing.describe()}")
    for r in uniq:
        assert len(r) == G and sum(r) == L and min(r) >= 1, r
    return Plan(num_layers=L, stages=G, scheme=scheme, runs=tuple(uniq),
                sources=sources_for_windows(L, wins, G))


def profiling_plan(num_layers: int, stages: int, scheme: str = "mcap") -> Plan:
    """The profiling partitionings for ``num_layers`` layers on ``stages`` devices."""
    _check(num_layers, stages, scheme)
    runs = _mcap_runs(num_layers, stages) if scheme == "mcap" else _capture_runs(num_layers, stages)
    return _finish(num_layers, stages, scheme, runs)


def _balances(runs: Iterable) -> list[tuple[int, ...]]:
    return [tuple(r.balance) if isinstance(r, Run) else tuple(r) for r in runs]


def replan(num_layers: int, stages: int, ok_runs: Iterable, failed_runs: Iterable,
           planned: Iterable = ()) -> tuple[tuple[int, ...], ...]:
    """Further balances that yield the statistics ``ok_runs`` still leave missing.

    ``ok_runs`` and ``failed_runs`` are Runs or plain balances; ``planned`` are balances
    already queued (not repeated). Windows of failed runs that no ok run confirmed are
    *suspect* (one of them ran out of memory) and are avoided: a missing mem_added(l)
    takes the smallest n whose windows n..l-1, n..l are not suspect (a larger n is a
    smaller window), a missing mem_isolated(l) puts layer l alone again with the other
    layers moved around, and no failed or planned balance is repeated. Returns () when
    nothing is missing; raises McapError when a statistic cannot be obtained at all.

    An oom Run whose error names the stage that ran out (``mcap.core.profiling.stats.
    over_capacity_windows``) proves that window over the capacity: it, and every window
    containing it, is never planned again, and the run's other stages are not suspects
    (they only stopped early). A mem_added(l) whose pair l-1..l is over needs no window
    pair (none can fit); layer l-1 alone gives its lower bound (``mcap.core.profiling.stats``).
    Under a proven limit a missing mem_added takes the *shortest* pair that avoids the
    over windows (the largest n): the long prefixes of 3.1 are what ran out.
    """
    L, G = num_layers, stages
    ok = [b for b in _balances(ok_runs) if sum(b) == L]
    failed = [b for b in _balances(failed_runs) if sum(b) == L]
    avoid = set(ok) | set(failed) | set(_balances(planned))
    have = {w for b in ok for w in stage_windows(b)}
    over = over_capacity_windows(failed_runs)
    named = {tuple(r.balance) for r in failed_runs if isinstance(r, Run)
             and any(w in over for w in stage_windows(r.balance))}
    # How many failed runs held each window that no ok run cleared: once is suspect
    # (avoided when there is another way), twice (with different fills) is taken as out of
    # memory. An ok window a'..z' clears every window inside it: more layers on a device
    # rarely need less memory, so the culprit of an OOM is sought among the others.
    fails: dict[Window, int] = {}
    for b in set(failed):
        for w in stage_windows(b):
            if b in named and w not in over:
                continue  # the run names its culprit; its other stages prove nothing
            if not any(a <= w[0] and w[1] <= z for a, z in have):
                fails[w] = fails.get(w, 0) + (2 if w in over else 1)
    # Under a proven capacity a layer may never fit alone beside the rest (every other
    # stage would hold an over window); its mem_isolated is then derived from a window
    # l..z as mcap.core.profiling.stats allows (exact under Listing 1.1).
    missing = missing_for_windows(L, have, max([len(b) for b in ok] + [G]), derive=bool(over), over=over)
    if not missing:
        return ()
    probe = _Slot([], 0, L - 1, G)
    seen_place: dict[Window, bool] = {}

    def placeable(w: Window) -> bool:
        """Some G-stage run holds w with no stage containing a proven-over window."""
        if w not in seen_place:
            seen_place[w] = next(safefill.fills(0, L - 1, G, [w], over), None) is not None
        return seen_place[w]
    # The longest window known to fit: new windows and fills stay within it where possible.
    cap = max([z - a + 1 for a, z in have] + [-(-L // G)])
    needed: set[Window] = set()
    hopeless = []
    for l in missing.isolated:
        # Alone on a stage; with 2 stages a middle layer cannot be, so its suffix window
        # l..L-1 is measured instead and mem_isolated derived (see mcap.core.profiling.stats).
        w = (l, l) if probe.can_take((l, l)) else (l, L - 1)
        if over and not placeable(w):
            w = next(((l, z) for z in range(l + 1, L) if not doomed((l, z), over)
                      and placeable((l, z))), w)
        if doomed(w, over):
            hopeless.append(f"mem_isolated({l}): layers {w[0]}..{w[1]} alone exceed the capacity")
        elif over and not placeable(w):
            hopeless.append(f"mem_isolated({l}): no {G}-stage run holds layers {w[0]}..{w[1]} "
                            f"without a stage known to exceed the capacity")
        elif fails.get(w, 0) >= 2:
            hopeless.append(f"mem_isolated({l}): layers {w[0]}..{w[1]} ran out of memory in {fails[w]} runs")
        needed.add(w)
    for l in missing.added:
        if over and doomed((l - 1, l), over):
            # No pair can fit; measuring l-1 alone (if missing) gives the lower bound.
            if (l - 1, l - 1) not in have:
                needed.add((l - 1, l - 1))
            continue
        pairs = [[(n, l - 1), (n, l)] for n in range(0, l)]
        pairs = [p for p in pairs if all(w in have or probe.can_take(w) for w in p)]
        if over:  # shortest first, only windows some run avoiding the over ones can hold
            pairs = [p for p in reversed(pairs) if all(w in have or placeable(w) for w in p)]
        strict = [p for p in pairs if not any(w in fails for w in p) and (not fails or l - p[0][0] + 1 <= cap)]
        soft = [p for p in pairs if all(fails.get(w, 0) < 2 for w in p)]
        choice = (strict or soft or [None])[0]
        if choice is None:
            hopeless.append(f"mem_added({l}): every window pair n..{l - 1}, n..{l} ran out of memory twice")
            continue
        needed.update(w for w in choice if w not in have)
    if hopeless:
        raise McapError(f"cannot measure on {G} stages: " + "; ".join(hopeless))
    suspect = bool(fails)
    out: list[tuple[int, ...]] = []
    slots = _pack_new(sorted(needed), L, G, max_stage=cap if suspect else None)
    while slots:
        slot = slots.pop(0)
        bal = _pick(slot, G, over, avoid)
        if bal is None and len(slot.wins) > 1:
            # No fill of the packed run avoids the over windows: one window per run.
            slots[:0] = _pack_new([slot.wins[0]], L, G) + _pack_new(slot.wins[1:], L, G)
            continue
        if bal is None:
            raise McapError(f"every {G}-stage run holding layers {slot.wins} has already failed "
                            f"or holds layers known to exceed the capacity; cannot measure them")
        avoid.add(bal)
        out.append(bal)
    return tuple(out)


def _pick(slot: _Slot, G: int, over, avoid) -> Optional[tuple[int, ...]]:
    """The slot's first balance neither tried nor holding an over window: the even fills
    first, then (under a proven capacity) the fills of ``mcap.core.profiling.safefill``."""
    for shift in range(0, 4 * G + 1):
        bal = slot.balance(shift)
        if bal not in avoid and not any(doomed(w, over) for w in stage_windows(bal)):
            return bal
    if over:
        for fill in safefill.fills(slot.first, slot.last, slot.stages, slot.wins, over):
            bal = tuple(slot.head) + fill
            if bal not in avoid:
                return bal
    return None
