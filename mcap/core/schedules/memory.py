"""Every rank's peak under any schedule, from a profile's measured op events (issue 39).
Pure: no torch, no files.

mCAP (3.1-3.3) reads one number per window, the peak of a stage holding layers a..z, and
adds windows up. Under a multi-stage schedule a rank holds several chunks whose
micro-batches are in flight in an order only the action list tells
(:mod:`mcap.core.schedules.actions`), so one number per window cannot say when a rank
peaks. The stage processes record more than the peak: each forward (F), backward (B, or I
then W under zero bubble) and optimizer step is a segment of a byte-exact memory timeline
(``mcap.runner.alone.StageTimer``: bytes before, highest inside, bytes after). This module
reads, per chunk window, what each op *adds* (``d``, after minus before) and how far it
rises above its start (``t``), and replays a rank's action list with them:

    level = static(rank) ;  for each action (c, kind):  peak = max(peak, level + t(c, kind))
                                                         level += d(c, kind)
    end of the step: the held sends are let go; the optimizer step rises by t_S

Measured on CPU (``bench/bench_schedules.py``): the ops of a chunk add the same bytes in
every schedule and at every place on a rank (GPipe, interleaved 1F1B and looped BFS read
the same F and B bytes for the same window to the byte); what differs between places is
only what *the runtime* holds around them, which is modelled from torch's rules, each
checked on the measurements:

- **receive buffers**: a ``PipelineStage`` allocates one per micro-batch for every
  boundary of its chunk (the input from the previous chunk, the gradient from the next),
  once, for the life of the stage, also where the neighbour is on the same rank (the
  V-shaped schedules pass that tensor directly and leave the buffer unused);
- **sends**: the runtime keeps every send's work, and so its tensor, until the end of the
  step: a chunk's output after its backward freed its own reference, and the gradient a
  backward computed for its input; a chunk whose neighbour is on the same rank passes the
  tensor instead, and the input gradient lives until that neighbour's backward used it;
- the end of the step lets go of every send's tensor, except the input gradients an I
  computed (zero bubble), which its receive buffer's ``.grad`` keeps until the next step's
  start (``PipelineStage.clear_runtime_states``), and of the batch (first chunk) and the
  targets and losses (last chunk), whose bytes are fitted on the profile's own ranks;
- the weights, optimizer state and receive buffers a rank holds all the time (``static``)
  are a per-layer sum fitted by least squares on every measured rank.

A profile records, per op kind and occurrence (the chunk's first backward allocates the
gradients; its last may differ), the per-window bytes; unmeasured windows come from
mCAP's own reading (:func:`mcap.core.profiling.stats.solve_windows`: ``iso(a) + sum of
added``), which is exact for bytes that add up and mCAP's approximation for the transient
rises. A profile measured under one schedule predicts another when it holds the op kinds
the other runs (B for GPipe, interleaved 1F1B and looped BFS; I and W for the zero-bubble
ones; DualPipeV runs both): :meth:`EventModel.covers`.
"""
from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.partition import windows as balance_windows
from mcap.core.schedules.actions import ActionList
from mcap.core.schedules.tables import (  # noqa: F401 (re-exported)
    RiseTable, SplitTable, WindowTable, _rise_table, _table, split_plan)
from mcap.core.setup import checkpoint_modes

OCCURRENCES = ("first", "mid", "last")
OP_KINDS = ("F", "B", "I", "W")


# Ops that compute weight gradients (B, W) form one sequence per chunk: the first of them
# allocates the gradients, whichever kind it is (DualPipeV mixes B with I/W on one chunk).
_FAMILY = {"F": "F", "I": "I", "B": "BW", "W": "BW"}


def occurrences(ops: Sequence[tuple], chunks: Optional[int] = None) -> list[str]:
    """For each (kind, chunk[, micro-batch]) in a rank's order: whether it is the chunk's
    first op of its family (F; I; B and W together), its last, or one in between (``mid``);
    ``+`` when it is the step's last micro-batch (``chunks - 1``: the one checkpointing
    ``except_last`` does not recompute, whatever place the schedule gives it)."""
    keys = [(_FAMILY[op[0]], op[1]) for op in ops]
    total = collections.Counter(keys)
    seen: collections.Counter = collections.Counter()
    out = []
    for key, op in zip(keys, ops):
        seen[key] += 1
        o = "first" if seen[key] == 1 else "last" if seen[key] == total[key] else "mid"
        out.append(o + "+" if chunks is not None and len(op) > 2 and op[2] == chunks - 1 else o)
    return out


def lookups(occ: str) -> tuple[str, ...]:
    """Where an op's bytes are looked for: its own occurrence, the same without the last
    micro-batch's mark, then any other reading of that op (a mode whose micro-batches all
    behave alike reads the same everywhere)."""
    base = occ.rstrip("+")
    return tuple(dict.fromkeys((occ, base, "mid", "last", "first", "mid+", "last+", "first+")))


@dataclass(frozen=True)
class Context:
    """Where a chunk sits on its rank: whether its neighbours are on another rank."""
    cross_in: bool   # c > 0 and chunk c-1 on another rank
    local_in: bool   # c > 0 and chunk c-1 on this rank
    cross_out: bool  # c < n-1 and chunk c+1 on another rank
    local_out: bool  # c < n-1 and chunk c+1 on this rank


def contexts(placement: Sequence[Sequence[int]], rank: int, num_chunks: int) -> dict:
    rank_of = {c: r for r, held in enumerate(placement) for c in held}
    out = {}
    for c in placement[rank]:
        prev = c > 0 and rank_of[c - 1] == rank
        nxt = c < num_chunks - 1 and rank_of[c + 1] == rank
        out[c] = Context(c > 0 and not prev, prev, c < num_chunks - 1 and not nxt, nxt)
    return out


def runtime_holds(al: ActionList, rank: int, wins, out_bytes: Sequence[int]):
    """What the runtime holds around the rank's ops, beyond what the ops themselves keep
    (module docstring): per action, the bytes it leaves held that are not its own
    (``extra[k]``), and the bytes let go after the first j actions (``frees[j]``; ``frees[n]``
    at the end of the step, before the optimizer's).

    - a forward whose next chunk is on this rank hands that chunk its output as its input
      buffer, whose old tensor (the last step's) goes;
    - a backward (B or I) leaves its chunk's output held while a send or the loop's own
      variable still holds it, or when the next chunk on this rank holds it as its input
      buffer;
    - a backward leaves the gradient for its input held when it sent it to another rank,
      until the send is let go of; an I's gradient stays on the receive buffer's ``.grad``
      until the next step; on this rank it replaces the previous chunk's gradient buffer,
      whose old tensor goes (no change);
    - when sends are let go of: ``al.releases`` (traced off torch's single-stage loops),
      else at the end of the step (the multi-stage runtime)."""
    acts = al.actions(rank)
    n = len(acts)
    ctx = contexts(al.placement, rank, al.num_chunks)
    when = {(k, c, m): after for k, c, m, after in al.releases[rank]} if al.releases else {}
    extra = [0] * n
    frees: collections.Counter = collections.Counter()
    for k, act in enumerate(acts):
        c, m = act.stage, act.microbatch
        a, b = wins[c]
        if act.kind == "F":
            if ctx[c].local_out:
                extra[k] -= out_bytes[b]
            continue
        if act.kind not in ("B", "I"):
            continue
        if ctx[c].local_out:
            extra[k] += out_bytes[b]
        else:
            # who else still holds the output when the backward frees its own reference: a
            # send to the next chunk, or the loop's variable
            holders = [when.get(("O", c, m), 0)]
            if ctx[c].cross_out:
                holders.append(when.get(("F", c, m), n))
            after = max(holders)
            if after > k:
                extra[k] += out_bytes[b]
                frees[after] += out_bytes[b]
        if ctx[c].cross_in:
            extra[k] += out_bytes[a - 1]
            if act.kind == "B":
                frees[when.get(("B", c, m), n)] += out_bytes[a - 1]
    return extra, frees


def recv_buffers(chunks: int, a: int, b: int, num_layers: int, out_bytes: Sequence[int]) -> int:
    """A chunk's receive buffers: one per micro-batch for each of its boundaries."""
    return chunks * ((out_bytes[a - 1] if a > 0 else 0) + (out_bytes[b] if b < num_layers - 1 else 0))


@dataclass(frozen=True)
class RankObservation:
    """One rank of one measured run, read off its memory timeline (the last iteration)."""
    windows: tuple[tuple[int, int], ...]  # of the chunks it holds, in stage order
    first_chunk: bool
    last_chunk: bool
    base: int        # bytes held before the step's first op (after zero_grad)
    before: int      # bytes held when the step started (before zero_grad)
    release: int     # bytes the end of the step let go
    step_rise: int   # the optimizer step's rise above its start
    sends: int       # bytes of sends the end of the step lets go of
    recv: int        # receive buffers (recv_buffers summed)
    ops: tuple       # (kind, window, (checkpoint mode, occurrence), intrinsic d, t)


def observe(run, setup, actions: ActionList, out_bytes: Sequence[int]) -> list[RankObservation]:
    """Every rank of ``run`` (measured alone, with its memory timeline) as observations;
    [] when the run recorded no timeline."""
    if run.status != "ok" or not run.times or any(not t.memory for t in run.times):
        return []
    wins = balance_windows(run.balance)
    n, L, M = len(wins), sum(run.balance), setup.chunks
    out = []
    for rank, times in enumerate(run.times):
        chunks = actions.placement[rank]
        modes = checkpoint_modes(setup.checkpoint, n)
        last_it = max(e[1] for e in times.memory)
        ev = [e for e in times.memory if e[1] == last_it]
        ops, release, rise = _ops(ev, rank, n == setup.stages)
        acts = actions.actions(rank)
        if [(k, c) for k, c, _, _ in ops] != [(a.kind, a.stage) for a in acts]:
            raise McapError(f"rank {rank} of {list(run.balance)} did not run the schedule's "
                            "action list")
        occ = occurrences([(a.kind, a.stage, a.microbatch) for a in acts], M)
        extra, frees = runtime_holds(actions, rank, wins, out_bytes)
        read = []
        for k, ((kind, c, d, t), o) in enumerate(zip(ops, occ)):
            # the op's bytes less what the runtime held for it, plus what it let go after it
            after = frees[k + 1] if k + 1 < len(ops) else 0
            read.append((kind, wins[c], (modes[c], o), d - extra[k] + after, t))
        recv = sum(recv_buffers(M, *wins[c], L, out_bytes) for c in chunks)
        sends = frees[len(ops)]
        out.append(RankObservation(tuple(wins[c] for c in chunks), 0 in chunks, n - 1 in chunks,
                                   ev[0][5], ev[0][3], release, rise, sends, recv, tuple(read)))
    return out


def _ops(ev, rank: int, one_chunk: bool):
    """(kind, chunk, d, t) per op, each folding the schedule's work after it (the loss after
    a last chunk's forward) up to the next op; the step's release and the optimizer's rise."""
    ops, release, rise = [], 0, 0
    i = 1
    while i < len(ev):
        kind = ev[i][0]
        if kind == "S":
            release, rise = ev[i - 1][3] - ev[i - 1][5], ev[i][4] - ev[i][3]
            i += 1
            continue
        if kind == "-":
            i += 1
            continue
        before, peak, after = ev[i][3], ev[i][4], ev[i][5]
        chunk = rank if one_chunk or len(ev[i]) < 7 else ev[i][6]
        j = i + 1
        while j + 1 < len(ev) and ev[j][0] == "-" and ev[j + 1][0] != "S":
            peak, after = max(peak, ev[j][4]), ev[j][5]
            j += 1
        ops.append((kind, chunk, after - before, peak - before))
        i = j
    return ops, release, rise


@dataclass
class EventModel:
    """A profile's op bytes per window, static bytes per layer, and the runtime's release
    coefficients; :meth:`rank_peaks` replays an action list with them."""
    num_layers: int
    chunks: int
    out_bytes: tuple[int, ...]
    d: dict          # (kind, occurrence) -> WindowTable
    t: dict          # (kind, occurrence) -> WindowTable
    static: np.ndarray
    release: tuple[float, float]  # the batch's bytes (first chunk), the targets' (last chunk)
    step_rise: dict  # layer -> optimizer rise: a rank's, by its share of the largest layer
    kinds: frozenset
    schedule: str
    mode: str = "never"  # the checkpoint mode predicted where none is given per chunk

    def covers(self, al: ActionList) -> bool:
        """Whether this model has measured every op kind ``al`` runs."""
        return {a.kind for r in range(al.stages) for a in al.actions(r)} <= self.kinds

    def _op(self, table: dict, kind: str, occ, a: int, b: int) -> int:
        mode, occ = occ if isinstance(occ, tuple) else (self.mode, occ)
        for o in lookups(occ):
            tab = table.get((kind, (mode, o)))
            if tab is not None:
                v = tab.get(a, b)
                if v is not None:
                    return v
        if mode not in self.modes:
            raise McapError(f"the profiles measured checkpointing {', '.join(sorted(self.modes))}"
                            f", not {mode}: profile with --checkpoint {mode} too")
        raise McapError(f"the profile measured no {kind} op over layers {a}..{b} or the layers "
                        "it would be read from")

    @property
    def modes(self) -> frozenset:
        """The checkpoint modes the profiles measured ops under."""
        return frozenset(m for _, (m, _) in self.d)

    def rank_peaks(self, balance: Sequence[int], al: ActionList,
                   modes: Optional[Sequence[str]] = None) -> tuple[int, ...]:
        """Every rank's predicted peak for ``balance`` (G·V chunks) under ``al``, with each
        chunk checkpointed as ``modes`` says (default: every chunk as ``self.mode``)."""
        wins = balance_windows(tuple(balance))
        if len(wins) != al.num_chunks:
            raise McapError(f"balance {list(balance)} has {len(wins)} chunks but the schedule "
                            f"runs {al.num_chunks}")
        if not self.covers(al):
            missing = sorted({a.kind for r in range(al.stages) for a in al.actions(r)} - self.kinds)
            raise McapError(f"schedule {al.schedule} runs {', '.join(missing)} ops, which this "
                            f"profile (measured under {self.schedule}) never measured: profile "
                            f"under a schedule that runs them")
        modes = tuple(modes) if modes is not None else (self.mode,) * len(wins)
        return tuple(self._rank(wins, al, r, modes) for r in range(al.stages))

    def rank_peak(self, balance: Sequence[int], al: ActionList, rank: int,
                  modes: Sequence[str]) -> int:
        """One rank's predicted peak (its chunks' ``modes``; the others are not read)."""
        return self._rank(balance_windows(tuple(balance)), al, rank, tuple(modes))

    def _rank(self, wins, al: ActionList, rank: int, modes) -> int:
        """Long because: one replay of the rank's action list, with the runtime's holds."""
        n, L, M, ob = len(wins), self.num_layers, self.chunks, self.out_bytes
        chunks = al.placement[rank]
        layers = [l for c in chunks for l in range(wins[c][0], wins[c][1] + 1)]
        level = float(self.static[layers].sum())
        level += sum(recv_buffers(M, *wins[c], L, ob) for c in chunks)
        first, last = 0 in chunks, n - 1 in chunks
        peak = level
        acts = al.actions(rank)
        occ = occurrences([(a.kind, a.stage, a.microbatch) for a in acts], M)
        extra, frees = runtime_holds(al, rank, wins, ob)
        for k, (act, o) in enumerate(zip(acts, occ)):
            a, b = wins[act.stage]
            o = (modes[act.stage], o)
            peak = max(peak, level + self._op(self.t, act.kind, o, a, b))
            # the op's own bytes, what the runtime holds for it, and what it lets go after
            level += self._op(self.d, act.kind, o, a, b) + extra[k] \
                - (frees[k + 1] if k + 1 < len(acts) else 0)
        level -= frees[len(acts)] + self.release[0] * first + self.release[1] * last
        rise = max((self.step_rise.get(l, 0) for l in layers), default=0)
        return int(round(max(peak, level + rise)))


def _static(A: np.ndarray, y: np.ndarray, param_bytes: Sequence[int],
            groups: Optional[Sequence] = None) -> np.ndarray:
    """Per-layer static bytes from the ranks' totals (``A @ static = y``): layers alike (one
    kind and one parameter size: ``groups``) hold the same, which the profile's few ranks
    can then tell apart; where they still cannot (layers always measured together, as a
    V-shaped schedule's first and last), least squares moves from a multiple of each
    layer's parameter bytes as little as the ranks require."""
    p = np.asarray(param_bytes, dtype=float)
    keys = list(groups) if groups is not None else list(range(len(p)))
    index = {k: i for i, k in enumerate(dict.fromkeys(keys))}
    G = np.zeros((len(p), len(index)))
    for l, k in enumerate(keys):
        G[l, index[k]] = 1.0
    B = A @ G  # ranks x groups
    pg = np.array([p[[l for l, k in enumerate(keys) if index[k] == j][0]]
                   for j in range(len(index))])
    Bp = B @ pg
    k = float(Bp @ y / (Bp @ Bp)) if Bp @ Bp > 0 else 0.0
    prior = k * pg
    fix, *_ = np.linalg.lstsq(B, y - B @ prior, rcond=None)
    return G @ (prior + fix)


def fit(observations: Sequence[RankObservation], num_layers: int, chunks: int,
        out_bytes: Sequence[int], schedule: str,
        param_bytes: Optional[Sequence[int]] = None,
        groups: Optional[Sequence] = None,
        layers: Optional[Sequence[tuple]] = None) -> EventModel:
    """The model from a profile's observed ranks (module docstring); ``layers``: per layer,
    (parameter bytes, whether torch saves its output, whether its parameters are one group)
    (``RiseTable._released``)."""
    if not observations:
        raise McapError("no rank with a memory timeline to read op bytes from: profile with "
                        "stages run alone (isolation stage)")
    d_meas: dict = collections.defaultdict(dict)
    t_meas: dict = collections.defaultdict(dict)
    rows, rhs, rel_rows, rel_rhs, rises, kinds, L = [], [], [], [], {}, set(), num_layers
    param_bytes = param_bytes if param_bytes is not None else [1] * num_layers
    for ob in observations:
        for kind, w, occ, d, t in ob.ops:
            kinds.add(kind)
            # the largest of repeated readings, as mCAP combines repeated peaks
            d_meas[(kind, occ)][w] = max(d_meas[(kind, occ)].get(w, d), d)
            t_meas[(kind, occ)][w] = max(t_meas[(kind, occ)].get(w, t), t)
        row = np.zeros(L)
        for a, b in ob.windows:
            row[a:b + 1] += 1
        rows.append(row)
        rhs.append(ob.base - ob.recv)
        rel_rows.append([float(ob.first_chunk), float(ob.last_chunk)])
        rel_rhs.append(ob.release - ob.sends)
        # a layer's step rise: at most a rank's, scaled by its share of the rank's largest
        held = [l for a, b in ob.windows for l in range(a, b + 1) if param_bytes[l]]
        for l in held:
            rises[l] = min(rises.get(l, np.inf), ob.step_rise * param_bytes[l] / max(
                param_bytes[j] for j in held))
    static = _static(np.array(rows), np.array(rhs, dtype=float), param_bytes, groups)
    release, *_ = np.linalg.lstsq(np.array(rel_rows), np.array(rel_rhs, dtype=float), rcond=None)
    seen_modes = collections.Counter(m for (_, (m, _)) in d_meas)
    d_tables = {k: _table(k[0], L, v) for k, v in d_meas.items()}
    return EventModel(L, chunks, tuple(out_bytes), d_tables, {k: _rise_table(
                          k[0], L, v, d_tables[k], _first_w(k, d_tables), out_bytes, layers)
                          for k, v in t_meas.items()},
                      static, (float(release[0]), float(release[1])), rises, frozenset(kinds),
                      schedule, mode=seen_modes.most_common(1)[0][0])


def _first_w(key, d_tables: dict):
    """For a W that is not its chunk's first, the first W's ``d`` table (same checkpoint
    mode), from which :class:`~mcap.core.schedules.tables.RiseTable` reads the weight
    gradients a W holds between parameter groups; None for other ops."""
    kind, (mode, occ) = key
    if kind != "W" or occ.rstrip("+") == "first":
        return None
    return d_tables.get(("W", (mode, "first")), d_tables.get(("W", (mode, "first+"))))
