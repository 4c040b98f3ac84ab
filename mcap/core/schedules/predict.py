"""Per-rank peaks, partitionings and schedule choice from profiles with op timelines
(issue 39, items 3 and 6). Pure: no torch, no files.

A profile measured under any schedule with stages run alone records every rank's memory
timeline; :func:`event_model` fits :class:`mcap.core.schedules.memory.EventModel` on one or
several such profiles of the same model, batch, micro-batches, checkpointing, precision and
machine (their schedules may differ: a GPipe profile measures the F and B ops, a zero-bubble
one the I and W ops; together they cover every schedule). The action lists come from the
caller (``actions(schedule, G, V, M)``: ``mcap.runner.orders.generate``, or
``mcap.io.orders`` where torch must not be imported), so nothing here knows torch.

:class:`RankCosts` predicts a partitioning of L layers into G·V chunks; :func:`search`
finds the one with the lowest predicted peak (ties broken by the sorted per-rank peaks, as
mCAP's tie-break): every partitioning when there are at most :data:`MAX_ENUMERATED`, else a
local search from several starts (each move shifts one boundary by one layer), which is
not exhaustive and says so. :func:`compare` ranks schedules and V for one model and
device count by predicted peak, with the time of an iteration replayed over the action list
from the profile's own op times, bubble included.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.partition import windows as balance_windows
from mcap.core.schedules import memory
from mcap.core.schedules.actions import ActionList, makespan, replay
from mcap.core.schedules.checkpointing import Checkpointed, choose_checkpointing, recomputed
from mcap.core.schedules.search import (
    MAX_ENUMERATED, Found, RankCosts, _key, all_balances, even, search, space_size)
from mcap.core.setup import COMPARED_FIELDS
from mcap.core.types import Profile

__all__ = ["Checkpointed", "Choice", "Found", "MAX_ENUMERATED", "OpTimes", "RankCosts",
           "all_balances", "candidates", "check_balance", "choose_checkpointing", "compare",
           "even", "event_model", "is_multi", "op_times", "recomputed", "search",
           "space_size", "split_backward", "stats_of"]

Actions = Callable[[str, int, int, int], ActionList]
# the Setup fields that must agree between profiles combined into one model (all that
# change an op's bytes; the schedule, the stage counts and the checkpointing may differ:
# the model keeps each checkpoint mode's ops apart)
SHARED_FIELDS = tuple(f for f in COMPARED_FIELDS if f not in ("schedule", "virtual_stages",
                                                              "checkpoint"))
_SHARED = SHARED_FIELDS


def is_multi(setup) -> bool:
    """Whether ``setup``'s partitionings are predicted rank by rank here (a multi-stage
    schedule, or more than one stage per rank)."""
    return schedules.get(setup.schedule).multi or setup.virtual_stages > 1


def split_backward(setup) -> bool:
    """Whether ``setup``'s schedule splits the backward (its profile needs the split plan,
    ``mcap.core.schedules.memory.split_plan``)."""
    return schedules.get(setup.schedule).split_backward


# Layers whose backward torch computes from their output, which autograd saves (not their
# input): the next layer's saved input is that same tensor.
SAVES_OUTPUT = frozenset({"ReLU", "Sigmoid", "Tanh"})
# Modules whose parameters torch's ``stage_backward_weight`` computes in one group (one
# autograd node holds them all): a zero-bubble W is read group by group only where every
# layer with parameters is one of these (``RiseTable._released``), not where a layer is a
# block of several (a transformer block's attention and MLP are groups of their own).
ONE_GROUP = frozenset({"Conv1d", "Conv2d", "Conv3d", "ConvTranspose1d", "ConvTranspose2d",
                       "Linear", "Embedding", "BatchNorm1d", "BatchNorm2d", "LayerNorm",
                       "GroupNorm", "RMSNorm"})


def event_model(profiles: Sequence[Profile], actions: Actions) -> memory.EventModel:
    """The op model of one or several profiles of one model and setup (module docstring).
    McapError when they differ in what changes an op's bytes, or record no timelines."""
    if not profiles:
        raise McapError("no profile to predict from")
    first = profiles[0]
    for p in profiles[1:]:
        if p.model != first.model:
            raise McapError(f"profiles of different models: {first.model.spec!r} and "
                            f"{p.model.spec!r}")
        diff = [f"{k} {getattr(first.setup, k)!r} vs {getattr(p.setup, k)!r}" for k in _SHARED
                if getattr(first.setup, k) != getattr(p.setup, k)]
        if diff:
            raise McapError("these profiles cannot be combined: " + "; ".join(diff))
    out_bytes = out_bytes_of(first)
    obs = []
    for p in profiles:
        s = p.setup
        al = actions(s.schedule, s.stages, s.virtual_stages, s.chunks)
        for run in p.runs:
            if run.status == "ok" and len(run.balance) == s.num_chunks:
                obs.extend(memory.observe(run, s, al, out_bytes))
    if not obs:
        raise McapError(f"profile {first.model.spec!r} records no memory timeline of its "
                        "ranks: profile it again with stages run alone (--isolation stage, "
                        "the default)")
    names = "+".join(dict.fromkeys(p.setup.schedule for p in profiles))
    layers = first.model.layers
    return memory.fit(obs, first.model.num_layers, first.setup.chunks, out_bytes, names,
                      [l.param_bytes for l in layers],
                      [(l.kind, l.param_bytes, l.out_bytes) if l.kind else i
                       for i, l in enumerate(layers)],
                      [(l.param_bytes, l.kind in SAVES_OUTPUT, l.kind in ONE_GROUP)
                       for l in layers] if all(l.kind for l in layers) else None)


def out_bytes_of(profile: Profile) -> tuple[int, ...]:
    """Each layer's output bytes per micro-batch, as the profile recorded them."""
    out = tuple(l.out_bytes for l in profile.model.layers)
    if not all(out):
        raise McapError(f"profile {profile.model.spec!r} does not record its layers' output "
                        "bytes (profiles made before issue 39): profile it again")
    return out


# --- comparing schedules ------------------------------------------------------------------

@dataclass(frozen=True)
class Choice:
    """One schedule's best partitioning for the model and devices."""
    schedule: str
    virtual: int
    balance: tuple[int, ...]
    peaks: tuple[int, ...]
    exhaustive: bool
    seconds: Optional[float]  # one iteration, replayed from the profile's op times
    bubble: Optional[float]

    @property
    def peak(self) -> int:
        return max(self.peaks)


def candidates(stages: int, chunks: int, num_layers: int, virtuals: Sequence[int] = (1, 2, 4)
               ) -> list[tuple[str, int]]:
    """(schedule, V) pairs torch can run for G ranks and M micro-batches over the layers."""
    out = []
    for s in schedules.REGISTRY:
        for v in ((1,) if s.stages_per_rank == "one" else (2,) if s.stages_per_rank == "two"
                  else virtuals):
            try:
                s.check(stages, v, chunks, num_layers)
            except McapError:
                continue
            out.append((s.name, v))
    return out


def compare(model: memory.EventModel, stages: int, chunks: int, actions: Actions,
            times: Optional["OpTimes"] = None, virtuals: Sequence[int] = (1, 2, 4),
            limit: int = MAX_ENUMERATED) -> tuple[list[Choice], list[str]]:
    """Every schedule and V the model covers, each with its best partitioning, lowest peak
    first (ties: the shorter iteration); and the (schedule, V) it could not predict, why."""
    out, skipped = [], []
    for name, v in candidates(stages, chunks, model.num_layers, virtuals):
        al = actions(name, stages, v, chunks)
        if not model.covers(al):
            skipped.append(f"{name} (V={v}): the profiles measured no "
                           + "/".join(sorted({a.kind for r in range(al.stages)
                                              for a in al.actions(r)} - model.kinds)) + " ops")
            continue
        found = search(RankCosts(model, al), limit=limit)
        secs = bub = None
        if times is not None:
            timed = replay(al, chunk_durations=times.chunk_durations(found.balance))
            secs, bub = makespan(timed), _bubble(timed, stages)
        out.append(Choice(name, v, found.balance, found.peaks, found.exhaustive, secs, bub))
    out.sort(key=lambda c: (c.peak, c.seconds if c.seconds is not None else 0.0))
    return out, skipped


def _bubble(timed, stages: int) -> float:
    from mcap.core.schedules.actions import bubble
    return bubble(timed, stages)


@dataclass
class OpTimes:
    """Seconds of each op kind per chunk window, read from the profiles' stage times
    (forwards and backwards are recorded in the order the rank ran them) and added up per
    layer as the bytes are (:class:`mcap.core.schedules.memory.WindowTable`)."""
    tables: dict  # kind -> WindowTable of seconds

    def chunk_durations(self, balance: Sequence[int]) -> list[dict]:
        out = []
        for a, b in balance_windows(tuple(balance)):
            d = {}
            for kind, tab in self.tables.items():
                v = tab.get(a, b)
                if v is not None:
                    d[kind] = max(float(v), 1e-9)
            out.append(d)
        return out


def op_times(profiles: Sequence[Profile], actions: Actions) -> Optional[OpTimes]:
    """The profiles' op seconds per window (median over repeats), or None without times."""
    from statistics import median
    seen: dict = {}
    for p in profiles:
        s = p.setup
        al = actions(s.schedule, s.stages, s.virtual_stages, s.chunks)
        for run in p.runs:
            if run.status != "ok" or not run.times or len(run.balance) != s.num_chunks:
                continue
            wins = balance_windows(run.balance)
            for rank, t in enumerate(run.times):
                acts = al.actions(rank)
                fw = [a for a in acts if a.kind == "F"]
                bw = [a for a in acts if a.kind != "F"]
                for it in range(len(t.forward)):
                    if len(t.forward[it]) != len(fw) or len(t.backward[it]) != len(bw):
                        continue
                    for a, sec in zip(fw, t.forward[it]):
                        seen.setdefault(a.kind, {}).setdefault(wins[a.stage], []).append(sec)
                    for a, sec in zip(bw, t.backward[it]):
                        seen.setdefault(a.kind, {}).setdefault(wins[a.stage], []).append(sec)
    if not seen:
        return None
    L = profiles[0].model.num_layers
    return OpTimes({k: memory.WindowTable(L, {w: float(median(v)) for w, v in per.items()})
                    for k, per in seen.items()})


def stats_of(model: memory.EventModel):
    """mCAP's per-layer statistics for a profile measured under a multi-stage schedule,
    from its op model: ``mem_isolated(l)`` the bytes a device holding only layer l keeps
    with all M micro-batches forwarded (its static bytes, receive buffers and M forwards'
    bytes: what GPipe holds before its first backward), ``mem_added(l)`` what layer l adds
    to a window before it that way. Exactly additive (the forward bytes as mCAP reads
    them, ``iso + added``, a layer the profile cannot tell adding none), so Listing 1.1 over
    them gives every window's footprint; the peaks come from the op model
    (``RankCosts``)."""
    from mcap.core.types import LayerStats
    L, M, ob = model.num_layers, model.chunks, model.out_bytes
    table = next((model.d[k] for k in (("F", (model.mode, "mid")), ("F", (model.mode, "first")))
                  if k in model.d), None)
    tab = getattr(table, "rest", table)  # a split table: the chunks that do not start at 0
    f_iso = [0] * L if tab is None else [v or 0 for v in tab.iso]
    f_add = [0] * L if tab is None else list(tab.added)
    s = [float(x) for x in model.static]
    boundary = [ob[l] for l in range(L)]
    iso = tuple(max(1, int(round(s[l] + M * f_iso[l] + M * (boundary[l - 1] if l else 0)
                                 + M * (boundary[l] if l < L - 1 else 0)))) for l in range(L))
    added = (None,) + tuple(int(round(s[l] + M * f_add[l]
                                      + M * ((boundary[l] if l < L - 1 else 0)
                                             - boundary[l - 1])))
                            for l in range(1, L))
    return LayerStats(mem_isolated=iso, mem_added=added)


def _or_zero(read) -> int:
    """An op's bytes where the profile can tell them, else 0 (a window no chunk of the
    profile's setup can be: the statistics stay defined, without that term)."""
    try:
        return read()
    except McapError:
        return 0


def check_balance(balance: Sequence[int], chunks: int, num_layers: int) -> tuple[int, ...]:
    """A balance of ``chunks`` entries over the layers, or McapError naming why."""
    b = tuple(int(n) for n in balance)
    if len(b) != chunks:
        raise McapError(f"balance {list(b)} has {len(b)} entries but the schedule runs "
                        f"{chunks} pipeline stages (ranks x virtual stages)")
    if any(n < 1 for n in b) or sum(b) != num_layers:
        raise McapError(f"balance {list(b)} is not a split of {num_layers} layers into "
                        f"{chunks} stages of at least one layer")
    return b





def fmt(n: int) -> str:
    from mcap.core.units import fmt_bytes
    return fmt_bytes(n)


# --- evaluation over a sweep ------------------------------------------------------------------

@dataclass(frozen=True)
class RankEvaluation:
    """A sweep of one schedule against the op model: per-rank errors |pred - meas| / meas,
    and where the model's pick lands among the measured partitionings (a sample may not
    hold it: then rank and ratio are None)."""
    schedule: str
    virtual: int
    partitionings: int
    ranks: int
    median: float
    p90: float
    max: float
    exact: int
    pick: tuple[int, ...]
    pick_predicted: int
    pick_measured: Optional[int]
    pick_rank: Optional[int]
    best: tuple[int, ...]
    best_peak: int
    exhaustive: bool
    unpredicted: tuple = ()  # ok partitionings the profiles give no reading of

    @property
    def ratio(self) -> Optional[float]:
        return None if self.pick_measured is None else self.pick_measured / self.best_peak


def evaluate(model: memory.EventModel, sweep, actions: Actions) -> RankEvaluation:
    from mcap.core.evaluate import percentile
    s = sweep.setup
    al = actions(s.schedule, s.stages, s.virtual_stages, s.chunks)
    costs = RankCosts(model, al)
    ok = [r for r in sweep.runs if r.status == "ok" and r.peaks]
    if not ok:
        raise McapError("the sweep has no ok run to compare with")
    errs, exact, unread = [], 0, []
    for r in ok:
        try:
            pred = costs.peaks(r.balance)
        except McapError:  # reported, not hidden: the profiles give no reading of a chunk
            unread.append(tuple(r.balance))
            continue
        for p, m in zip(pred, r.peaks):
            errs.append(abs(p - m) / m)
            exact += p == m
    found = search(costs)
    measured = {tuple(r.balance): max(r.peaks) for r in ok}
    order = sorted(measured.values())
    best = min(measured, key=lambda b: _key([p for r in ok if tuple(r.balance) == b
                                             for p in r.peaks]))
    got = measured.get(found.balance)
    if not errs:
        raise McapError(f"none of the sweep's {len(ok)} ok partitionings can be predicted "
                        "from these profiles")
    return RankEvaluation(s.schedule, s.virtual_stages, len(ok), len(errs),
                          percentile(errs, 50), percentile(errs, 90), max(errs), exact,
                          found.balance, max(found.peaks), got,
                          None if got is None else 1 + sum(1 for v in order if v < got),
                          best, measured[best], found.exhaustive, tuple(unread))
