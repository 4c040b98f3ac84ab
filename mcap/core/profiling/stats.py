"""Per-layer statistics from measured runs (mCAP 3.1). Pure: no torch, no files.

A run with balance b measures, for each stage, the peak PM(a..z) of a device holding
layers a..z: a *window*. From the windows:

* ``mem_isolated(l) = PM(l..l)``, a run where layer l is alone on a stage (3.1 (a)).
* ``mem_added(l) = PM(n..l) - PM(n..l-1)`` for the smallest n < l for which both windows
  were measured (3.1 (b), (c): "we keep n as small as possible"). With mCAP's plan
  (``mcap.core.profiling.schedule``) n = 0 for layers 1..L-G, i.e. both windows are prefixes on stage 0.
  For the last G-1 layers no prefix window exists (a stage holds at most L-G+1 layers),
  so n > 0 and the two windows may sit on different stage positions; for the very last
  layer they must: PM(n..L-1) is always on the last stage and PM(n..L-2) on the one before.

Which positions: a window's value does not depend on where it was measured; every
measurement of the same window, at any stage position in any ok run, is combined by
taking the **maximum**. On CPU repeated peaks are byte-exact and equal; on CUDA the
maximum keeps the prediction on the side of not running out of memory.

OOM and failed runs are skipped (they carry no trustworthy peaks).

**Over the capacity** (profiling under a capacity, mCAP 3.5). An oom run's error names the
stage that ran out ("stage 2 (layers 9..10): ... out of memory"), so that window's peak is
known to exceed the capacity; so is every window containing it (more layers on a device
rarely need less memory, the assumption ``mcap.core.profiling.schedule`` already makes). Only the
stage that raised counts: the other stages of an oom run stopped early and prove nothing.
When PM(l-1..l) is over the capacity, every window pair n..l-1, n..l contains it, so
mem_added(l) cannot be measured under that capacity at all; it is then replaced by its
**lower bound** ``capacity + 1 - PM(l-1..l-1)`` (PM(l-1..l) >= capacity + 1), so that
Listing 1.1 predicts any stage holding layers l-1 and l at or above the capacity: the
partitioning it belongs to is (correctly) predicted not to fit. The bound is used only
where no measured pair exists and the oom message states the capacity (the CPU tracker's
does; a real CUDA out-of-memory leaves the statistic missing).

Derived values (exact under Listing 1.1's model): when no run held layer k alone but
a window PM(k..z) was measured and mem_added(k+1..z) are known, then
``mem_isolated(k) = PM(k..z) - sum(mem_added(k+1..z))`` (the smallest such z is used).
This is what makes 2-stage profiling possible: with G = 2 a middle layer can never be
alone, and PM(n..L-2), PM(n..L-1) can never share an n (stage 1 always ends at L-1), so
**for profiles whose ok runs all have 2 stages, mem_added(L-1) is assumed to be 0** and
the middle layers' mem_isolated are derived from the suffix windows PM(k..L-1). Every
2-stage prediction then equals the measured peaks exactly (stage 0 is a measured prefix,
stage 1 a measured suffix); for other G the assumption over-predicts stages that start
at a middle layer by the true mem_added(L-1) (usually > 0: the last layer's weights), which
errs on the safe side.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

from mcap.core.errors import InvalidStatistics
from mcap.core.partition import windows
from mcap.core.types import LayerStats, Run


@dataclass(frozen=True)
class Windows:
    """Measured windows: ``peaks[(a, z)]`` = combined PM(a..z) (max over measurements)."""
    num_layers: int
    peaks: tuple[tuple[tuple[int, int], int], ...]  # sorted ((a, z), peak) pairs
    max_stages: int  # the most stages any contributing run had
    bounds: tuple[tuple[int, int], ...] = ()  # windows whose "peak" is capacity + 1, a bound

    def as_lookup(self) -> "_Lookup":
        return _Lookup(dict(self.peaks))


class _Lookup:
    def __init__(self, table):
        self.table = table

    def get(self, a: int, z: int) -> Optional[int]:
        return self.table.get((a, z))

    def __contains__(self, key) -> bool:
        return key in self.table


stage_windows = windows  # the name the statistics code reads best with

# One stage's message in a run's error (mcap.runner: "stage R (layers a..z): message",
# messages joined by "; "); the oom ones say "out of memory" (the CPU tracker and CUDA).
_STAGE_OOM = re.compile(r"stage (\d+) \(layers (\d+)\.\.(\d+)\): ([^;]*out of memory[^;]*)")
# The CPU tracker's message states the capacity it enforced (mcap/runner/_memtrack.cpp).
_CAPACITY = re.compile(r"exceed the capacity of (\d+) bytes")


def over_capacity(runs: Iterable) -> dict:
    """Windows proven over the capacity -> that capacity in bytes (None when the message
    does not state it, e.g. a real CUDA out-of-memory): the stages oom runs name as the
    ones that ran out.

    Plain balances and runs of other statuses give nothing. A window is taken only when the
    named layers are that stage of the run's balance (a message from another partitioning
    is ignored rather than trusted)."""
    out: dict = {}
    for run in runs:
        if not isinstance(run, Run) or run.status != "oom" or not run.error:
            continue
        wins = stage_windows(run.balance)
        for m in _STAGE_OOM.finditer(run.error):
            rank, a, z = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if rank < len(wins) and wins[rank] == (a, z):
                cap = _CAPACITY.search(m.group(4))
                value = int(cap.group(1)) if cap else None
                old = out.get((a, z))
                # The smallest capacity it failed under is the weakest, safe claim.
                out[(a, z)] = value if old is None else (old if value is None else min(old, value))
    return out


def over_capacity_windows(runs: Iterable) -> frozenset:
    """The windows of :func:`over_capacity`."""
    return frozenset(over_capacity(runs))


def doomed(window: tuple[int, int], over: Iterable[tuple[int, int]]) -> bool:
    """True when ``window`` contains a window proven over the capacity."""
    a, z = window
    return any(a <= x and y <= z for x, y in over)


def _pair_over(l: int, over) -> bool:
    """PM(l-1..l) is over the capacity (proven for it or a window inside it)."""
    return bool(over) and doomed((l - 1, l), over)


def collect(runs: Iterable[Run], num_layers: int) -> Windows:
    """Combine the windows of every ok run of ``num_layers`` layers (max per window).

    Oom runs add the over-capacity bounds (module docstring): a pair l-1..l proven over a
    stated capacity, with l-1 alone measured, enters as the window (l-1, l) with the peak
    capacity + 1 and is listed in ``bounds``."""
    runs = list(runs)
    best: dict[tuple[int, int], int] = {}
    max_stages = 0
    for run in runs:
        if run.status != "ok" or run.peaks is None or sum(run.balance) != num_layers:
            continue
        max_stages = max(max_stages, len(run.balance))
        for win, peak in zip(stage_windows(run.balance), run.peaks):
            best[win] = max(best.get(win, peak), int(peak))
    over = {w: c for w, c in over_capacity([r for r in runs if sum(r.balance) == num_layers]).items()}
    bounds = []
    for l in range(1, num_layers):
        pair = (l - 1, l)
        if pair in best or (l - 1, l - 1) not in best:
            continue
        caps = [c for (a, z), c in over.items() if l - 1 <= a and z <= l]
        if caps and all(c is not None for c in caps):
            best[pair] = min(caps) + 1
            bounds.append(pair)
    return Windows(num_layers=num_layers, peaks=tuple(sorted(best.items())), max_stages=max_stages,
                   bounds=tuple(bounds))


@dataclass(frozen=True)
class Missing:
    """Layers whose statistics cannot be obtained from the windows at hand."""
    isolated: tuple[int, ...]
    added: tuple[int, ...]

    def __bool__(self) -> bool:
        return bool(self.isolated or self.added)

    def describe(self) -> str:
        parts = []
        if self.isolated:
            parts.append(f"mem_isolated for layers {_fmt(self.isolated)} (needs a run with the layer alone "
                         "on a stage, or a window starting at it)")
        if self.added:
            parts.append(f"mem_added for layers {_fmt(self.added)} (needs windows n..l-1 and n..l on stages)")
        return "; ".join(parts)


def _fmt(layers: Sequence[int]) -> str:
    if len(layers) > 15:
        return ", ".join(map(str, layers[:15])) + f", ... ({len(layers)} layers)"
    return ", ".join(map(str, layers))


def _solve(num_layers: int, have, value, two_stage_only: bool, derive: bool = True,
           over=frozenset()):
    """The extraction rules above on abstract windows; returns (iso, added) lists with None holes.

    ``have(a, z)`` says whether PM(a..z) was measured, ``value(a, z)`` gives it (or None
    when only coverage is asked). ``over``: windows proven over the capacity; in coverage
    mode a mem_added(l) whose pair l-1..l is over counts as obtained once l-1 alone is
    (its lower bound, which ``collect`` enters as a window when values are read).
    """
    L = num_layers
    added: list[Optional[int]] = [None] * L
    known_added = [False] * L
    added_src: list[Optional[int]] = [None] * L  # n of the windows n..l-1, n..l
    iso_src: list[Optional[tuple[int, int]]] = [None] * L  # window the value is read from
    for l in range(1, L):
        for n in range(0, l):  # smallest n first (3.1)
            if have(n, l - 1) and have(n, l):
                known_added[l] = True
                added_src[l] = n
                if value is not None:
                    added[l] = value(n, l) - value(n, l - 1)
                break
        else:
            # Coverage only: with values, collect() has already entered the bound window.
            if value is None and _pair_over(l, over) and have(l - 1, l - 1):
                known_added[l] = True
                added_src[l] = l - 1
    if two_stage_only and L >= 2 and not known_added[L - 1]:
        known_added[L - 1] = True  # the documented G = 2 assumption
        added[L - 1] = 0 if value is not None else None
    iso: list[Optional[int]] = [None] * L
    known_iso = [False] * L
    for k in range(L):
        if have(k, k):
            known_iso[k] = True
            iso_src[k] = (k, k)
            if value is not None:
                iso[k] = value(k, k)
            continue
        # Derive from the shortest window k..z whose later layers all have mem_added.
        for z in range(k + 1, L if (derive or two_stage_only) else k + 1):
            if not known_added[z]:
                break
            if have(k, z):
                known_iso[k] = True
                iso_src[k] = (k, z)
                if value is not None:
                    iso[k] = value(k, z) - sum(added[k + 1:z + 1])
                break
    missing = Missing(isolated=tuple(i for i in range(L) if not known_iso[i]),
                      added=tuple(l for l in range(1, L) if not known_added[l]))
    return iso, added, missing, Sources(isolated=tuple(iso_src), added=tuple(added_src))


def solve_windows(num_layers: int, table: dict, two_stage_only: bool = False):
    """mCAP 3.1's reading on any per-window quantity: ``table[(a, z)]`` its measured value;
    returns (isolated, added, missing) as :func:`extract` reads mem_isolated and mem_added
    from peaks (``mcap.core.schedules.memory`` reads each op's bytes this way)."""
    iso, added, missing, _ = _solve(num_layers, lambda a, z: (a, z) in table,
                                    lambda a, z: table.get((a, z)),
                                    two_stage_only)
    return iso, added, missing


@dataclass(frozen=True)
class Sources:
    """Where each statistic is read from: ``isolated[l]`` the window (a, z) (a == z unless
    derived), ``added[l]`` the n of the windows n..l-1 and n..l (None for layer 0)."""
    isolated: tuple[Optional[tuple[int, int]], ...]
    added: tuple[Optional[int], ...]


def sources_for_windows(num_layers: int, windows: Iterable[tuple[int, int]], max_stages: int) -> Sources:
    ws = set(windows)
    return _solve(num_layers, lambda a, z: (a, z) in ws, None, max_stages == 2)[3]


def missing_for_windows(num_layers: int, windows: Iterable[tuple[int, int]], max_stages: int,
                        derive: bool = True, over: Iterable[tuple[int, int]] = ()) -> Missing:
    """Which statistics the given windows leave unobtainable (coverage only, no values).

    ``derive=False`` asks for every mem_isolated measured directly (a layer alone), as
    plans for G >= 3 do; with G = 2 derivation is the only way and always allowed.
    ``over``: windows proven over the capacity; a mem_added whose pair is over counts as
    obtained (its lower bound) once layer l-1 alone was measured.
    """
    ws = set(windows)
    missing = _solve(num_layers, lambda a, z: (a, z) in ws, None, max_stages == 2, derive,
                     frozenset(over))[2]
    return missing


def missing_statistics(num_layers: int, runs_ok: Iterable, over: Iterable = ()) -> Missing:
    """Completeness check for ``runs_ok`` (Runs, or plain balances assumed to succeed);
    ``over`` as in ``missing_for_windows``."""
    ws, max_stages = set(), 0
    for r in runs_ok:
        if isinstance(r, Run):
            if r.status != "ok":
                continue
            bal = r.balance
        else:
            bal = tuple(r)
        if sum(bal) != num_layers:
            continue
        max_stages = max(max_stages, len(bal))
        ws.update(stage_windows(bal))
    return missing_for_windows(num_layers, ws, max_stages, over=over)


def bounded_added(runs: Sequence[Run], num_layers: int) -> tuple[int, ...]:
    """The layers whose mem_added ``extract`` takes as the over-capacity lower bound (no
    measured window pair; module docstring)."""
    return tuple(z for _, z in collect(runs, num_layers).bounds)


def extract(runs: Sequence[Run], num_layers: int) -> LayerStats:
    """mem_isolated and mem_added of every layer from ``runs`` (see the module docstring).

    A mem_added that no window pair gives because its pair l-1..l ran out of a stated
    capacity takes the lower bound (``collect``).
    Raises InvalidStatistics naming the layers whose statistics are missing.
    """
    if num_layers < 1:
        raise InvalidStatistics(f"a model needs at least 1 layer, got {num_layers}")
    wins = collect(runs, num_layers)
    if not wins.peaks:
        raise InvalidStatistics(f"no ok run of {num_layers} layers to extract statistics from "
                                f"({sum(1 for r in runs if r.status != 'ok')} oom/failed runs skipped)")
    look = wins.as_lookup()
    iso, added, missing, _ = _solve(num_layers, lambda a, z: (a, z) in look, look.get, wins.max_stages == 2)
    if missing:
        raise InvalidStatistics(f"the runs do not give {missing.describe()}")
    bad = [i for i, v in enumerate(iso) if v <= 0]
    if bad:
        raise InvalidStatistics(f"mem_isolated came out non-positive for layers {_fmt(bad)} "
                                f"({[iso[i] for i in bad[:5]]}); the measured peaks are inconsistent")
    return LayerStats(mem_isolated=tuple(int(v) for v in iso),
                      mem_added=(None,) + tuple(int(v) for v in added[1:]))
