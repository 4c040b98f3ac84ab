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
  bench/log/2026-11-22-search-and-profiling-runs.md); ``bench/plan_runs.py`` prints the counts.
* G = 2: the runs (k, L-k), k = 1..L-1 (L-G+1 runs, the whole space). A middle layer can
  never be alone on one of two devices, so its mem_isolated is derived from the suffix
  window PM(k..L-1), under the assumption documented in ``mcap.core.profiling.stats`` (mem_added(L-1) = 0,
  exact for every 2-stage partitioning).

Scheme ``"capture"``: CAPTURE's Description 1 (003, III-A1), generalised to L not
divisible by G with q = L // G: for each moving stage s = 0..G-3, the stages before it
hold q layers, stage s holds j = 1..q+1 layers, the next two stages one layer each, and
the rest is spread evenly; then a run with the last two layers on the last stage. Any
statistic this leaves missing (L not divisible by G) is completed as ``replan`` does
(``replanning.py``; windows are placed in runs by ``placing.py``).

No plan contains a duplicate; every plan is checked for completeness before it is returned.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from mcap.core.errors import McapError
from mcap.core.profiling.placing import Window, _even, _match, _pack_new, _Slot
from mcap.core.profiling.replanning import replan
from mcap.core.profiling.stats import Sources, missing_for_windows, sources_for_windows, stage_windows

SCHEMES = ("mcap", "capture")


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
