"""More profiling runs when the planned ones left statistics missing (:func:`replan`): after
a run ran out of memory or failed, the windows it held are suspect or proven over the
capacity, and the missing mem_isolated / mem_added are placed in new runs that avoid them
(``mcap.core.profiling.safefill`` for fills around proven windows). Pure."""
from __future__ import annotations

from typing import Iterable, Optional

from mcap.core.errors import McapError
from mcap.core.profiling import safefill
from mcap.core.profiling.placing import Window, _pack_new, _Slot
from mcap.core.profiling.stats import (
    doomed, missing_for_windows, over_capacity_windows, stage_windows,
)
from mcap.core.types import Run


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
    ev = _Evidence.of(L, G, ok, failed, failed_runs)
    # Under a proven capacity a layer may never fit alone beside the rest (every other
    # stage would hold an over window); its mem_isolated is then derived from a window
    # l..z as mcap.core.profiling.stats allows (exact under Listing 1.1).
    missing = missing_for_windows(L, ev.have, max([len(b) for b in ok] + [G]),
                                  derive=bool(ev.over), over=ev.over)
    if not missing:
        return ()
    needed: set[Window] = set()
    hopeless = []
    for l in missing.isolated:
        w, why = _isolated_window(ev, l)
        needed.add(w)
        if why:
            hopeless.append(why)
    for l in missing.added:
        ws, why = _added_windows(ev, l)
        needed.update(ws)
        if why:
            hopeless.append(why)
    if hopeless:
        raise McapError(f"cannot measure on {G} stages: " + "; ".join(hopeless))
    return _new_runs(ev, needed, avoid)


class _Evidence:
    """What the runs so far say about each window (:func:`replan`): ``have``, the windows an
    ok run measured; ``over``, those proven over the capacity; ``fails``, how many failed
    runs held each window no ok run cleared (a proven one counts twice); ``cap``, the
    longest window known to fit."""

    def __init__(self, L: int, G: int, have: set, over, fails: dict):
        self.L, self.G, self.have, self.over, self.fails = L, G, have, over, fails
        self.probe = _Slot([], 0, L - 1, G)
        self._placeable: dict[Window, bool] = {}
        # The longest window known to fit: new windows and fills stay within it where possible.
        self.cap = max([z - a + 1 for a, z in have] + [-(-L // G)])

    @classmethod
    def of(cls, L: int, G: int, ok, failed, failed_runs) -> "_Evidence":
        have = {w for b in ok for w in stage_windows(b)}
        over = over_capacity_windows(failed_runs)
        named = {tuple(r.balance) for r in failed_runs if isinstance(r, Run)
                 and any(w in over for w in stage_windows(r.balance))}
        # How many failed runs held each window that no ok run cleared: once is suspect
        # (avoided when there is another way), twice (with different fills) is taken as out
        # of memory. An ok window a'..z' clears every window inside it: more layers on a
        # device rarely need less memory, so the culprit of an OOM is sought among the others.
        fails: dict[Window, int] = {}
        for b in set(failed):
            for w in stage_windows(b):
                if b in named and w not in over:
                    continue  # the run names its culprit; its other stages prove nothing
                if not any(a <= w[0] and w[1] <= z for a, z in have):
                    fails[w] = fails.get(w, 0) + (2 if w in over else 1)
        return cls(L, G, have, over, fails)

    def placeable(self, w: Window) -> bool:
        """Some G-stage run holds w with no stage containing a proven-over window."""
        if w not in self._placeable:
            self._placeable[w] = next(safefill.fills(0, self.L - 1, self.G, [w], self.over),
                                      None) is not None
        return self._placeable[w]


def _isolated_window(ev: _Evidence, l: int) -> tuple[Window, Optional[str]]:
    """The window that gives mem_isolated(l), and why it cannot be measured (or None)."""
    L, G, over, fails = ev.L, ev.G, ev.over, ev.fails
    # Alone on a stage; with 2 stages a middle layer cannot be, so its suffix window
    # l..L-1 is measured instead and mem_isolated derived (see mcap.core.profiling.stats).
    w = (l, l) if ev.probe.can_take((l, l)) else (l, L - 1)
    if over and not ev.placeable(w):
        w = next(((l, z) for z in range(l + 1, L) if not doomed((l, z), over)
                  and ev.placeable((l, z))), w)
    if doomed(w, over):
        return w, f"mem_isolated({l}): layers {w[0]}..{w[1]} alone exceed the capacity"
    if over and not ev.placeable(w):
        return w, (f"mem_isolated({l}): no {G}-stage run holds layers {w[0]}..{w[1]} "
                   f"without a stage known to exceed the capacity")
    if fails.get(w, 0) >= 2:
        return w, (f"mem_isolated({l}): layers {w[0]}..{w[1]} ran out of memory in "
                   f"{fails[w]} runs")
    return w, None


def _added_windows(ev: _Evidence, l: int) -> tuple[list[Window], Optional[str]]:
    """The windows still to measure for mem_added(l) (a pair n..l-1, n..l), and why it
    cannot be measured (or None)."""
    have, over, fails = ev.have, ev.over, ev.fails
    if over and doomed((l - 1, l), over):
        # No pair can fit; measuring l-1 alone (if missing) gives the lower bound.
        return ([(l - 1, l - 1)] if (l - 1, l - 1) not in have else []), None
    pairs = [[(n, l - 1), (n, l)] for n in range(0, l)]
    pairs = [p for p in pairs if all(w in have or ev.probe.can_take(w) for w in p)]
    if over:  # shortest first, only windows some run avoiding the over ones can hold
        pairs = [p for p in reversed(pairs) if all(w in have or ev.placeable(w) for w in p)]
    strict = [p for p in pairs if not any(w in fails for w in p)
              and (not fails or l - p[0][0] + 1 <= ev.cap)]
    soft = [p for p in pairs if all(fails.get(w, 0) < 2 for w in p)]
    choice = (strict or soft or [None])[0]
    if choice is None:
        return [], (f"mem_added({l}): every window pair n..{l - 1}, n..{l} ran out of "
                    f"memory twice")
    return [w for w in choice if w not in have], None


def _new_runs(ev: _Evidence, needed: set, avoid: set) -> tuple[tuple[int, ...], ...]:
    """Runs holding every needed window: packed (no stage above ``ev.cap`` when a run has
    failed), each filled as neither tried nor holding an over window (:func:`_pick`)."""
    L, G, over = ev.L, ev.G, ev.over
    suspect = bool(ev.fails)
    out: list[tuple[int, ...]] = []
    slots = _pack_new(sorted(needed), L, G, max_stage=ev.cap if suspect else None)
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
