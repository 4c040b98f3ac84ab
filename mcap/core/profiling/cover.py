"""Stage reuse: measure each distinct stage once, compose every partitioning from them.

Pure: no torch, no files. A stage's peak depends only on its own layers, on where it
sits in the pipeline and on the setup (paper 3.2: a stage holds its weights, gradients
and optimizer state, plus the activations of the micro-batches in flight on it, which
the schedule fixes). So within one setup a stage is identified by its **stage key**,
and a partitioning's per-stage peaks can be composed from runs of *other*
partitionings that contain the same keys (on the CPU the same key's peak is identical
in every partitioning that holds it; issue 13).

The key, for a stage of layers ``first..last`` (inclusive) at index ``i`` of ``G``:

- ``gpipe``: ``(first, last, position)`` with position ``"only"`` (G == 1: the stage
  both takes the batch and computes the loss), ``"first"`` (takes the batch),
  ``"last"`` (computes the loss, receives the targets) or ``"middle"``. Every GPipe stage
  runs all M forwards before any backward, so every middle stage holds the same M
  micro-batches whatever its index.
- ``1f1b``: ``(first, last, i)``. Stage i runs G-1-i warm-up forwards and holds up to
  min(G-i, M) micro-batches (``mcap.core.schedules.actions.max_in_flight``), so its index matters.
- a multi-stage schedule (``mcap.core.schedules``: rank r holds several chunks): the key
  is the *rank*'s, ``(first, last, ("rank", r, window, window, ...))`` with its first and
  last layer and every chunk window it holds: its action list depends on r, and its peak
  on all of its chunks.

What is *not* in the key, and why it needs not be:

- the checkpoint mode: ``except_last`` / ``always`` / ``never`` choose which
  *micro-batches* are recomputed (torchgpipe's modes, ``mcap.runner.train.Recomputed``),
  the same on every stage, so they change peaks but not which stages are alike;
- the number of stages G, batch size, chunks, optimizer, capacity, device, engine:
  constant within one setup. Keys are only compared within one setup (one store
  study), and ``compose`` refuses runs whose stage count differs from the balance's;
- the neighbouring stages: a stage receives the output of layer first-1 and sends the
  output of layer last, both fixed by its own layers.

``greedy_cover`` picks, from a list of partitionings, a small subset that holds every
key of the list (greedy set cover: ln(n)-optimal, Chvátal 1979); ``Knowledge`` keeps
what measured runs say about each key and ``Knowledge.compose`` builds a run from it.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Hashable, Iterable, Optional, Sequence

from mcap.core import schedules as schedule_registry
from mcap.core.errors import McapError
from mcap.core.types import MemoryBreakdown, Run, StageRun, StageTimes

StageKey = tuple  # (first, last, position or index); hashable, ordered


def _check(schedule: str) -> None:
    schedule_registry.get(schedule)  # McapError naming the known ones


def stage_keys(balance: Sequence[int], schedule: str, virtual: int = 1
               ) -> tuple[StageKey, ...]:
    """The stage key of every stage (every rank, under a multi-stage schedule with
    ``virtual`` chunks per rank) of ``balance`` under ``schedule`` (see the module)."""
    _check(schedule)
    balance = tuple(int(n) for n in balance)
    if not balance or any(n < 1 for n in balance):
        raise McapError(f"balance {list(balance)} needs at least one layer on every stage")
    if schedule_registry.get(schedule).multi:
        return _rank_keys(balance, schedule, virtual)
    g = len(balance)
    out, start = [], 0
    for i, n in enumerate(balance):
        first, last = start, start + n - 1
        start += n
        if schedule == "1f1b":
            out.append((first, last, i))
        elif g == 1:
            out.append((first, last, "only"))
        else:
            out.append((first, last, "first" if i == 0 else "last" if i == g - 1 else "middle"))
    return tuple(out)


def _rank_keys(balance: tuple[int, ...], schedule: str, virtual: int) -> tuple[StageKey, ...]:
    if len(balance) % virtual:
        raise McapError(f"balance {list(balance)} has {len(balance)} chunks, not a multiple of "
                        f"{virtual} stages per rank")
    g = len(balance) // virtual
    bounds, start = [], 0
    for n in balance:
        bounds.append((start, start + n - 1))
        start += n
    out = []
    for r, held in enumerate(schedule_registry.get(schedule).placement(g, virtual)):
        wins = tuple(bounds[c] for c in held)
        out.append((wins[0][0], wins[-1][1], ("rank", r) + wins))
    return tuple(out)


def distinct_keys(balances: Iterable[Sequence[int]], schedule: str,
                  virtual: int = 1) -> set[StageKey]:
    return {k for b in balances for k in stage_keys(b, schedule, virtual)}


def greedy_cover(balances: Sequence[Sequence[int]], schedule: str,
                 known: Iterable[Hashable] = (), virtual: int = 1) -> list[tuple[int, ...]]:
    """A small subset of ``balances`` whose stages hold every stage key of ``balances``
    not already in ``known``, in the order picked.

    Two greedy set covers (Chvátal 1979), the smaller one kept: (a) each pick holds the
    most keys not yet held, ties broken towards keys few balances hold (sum of 1/holders:
    a rare key left for later costs a pick of its own); (b) rarest key first: take the
    key the fewest balances hold and the holder of it that holds the most other keys.
    Then drop any pick whose keys the other picks all hold. Deterministic (remaining
    ties: the earlier balance in the list). For VGG11 (30 layers, 4 stages, all 3,654
    balances) this picks 234 under GPipe (459 keys; lower bound 203) and 560 under 1F1B
    (810 keys; 560 is optimal there: a boundary after layer b needs max(b, 28-b) picks).
    """
    balances = [tuple(int(n) for n in b) for b in balances]
    keysets = [frozenset(stage_keys(b, schedule, virtual)) for b in balances]
    have = set(known)
    holders: dict = {}
    for i, ks in enumerate(keysets):
        for k in ks - have:
            holders.setdefault(k, []).append(i)
    if not holders:
        return []
    best = min((_most_first(keysets, holders), _rarest_first(keysets, holders)), key=len)
    return [balances[i] for i in _prune(best, keysets, have)]


def _most_first(keysets, holders) -> list[int]:
    need = set(holders)
    weight = {k: 1.0 / len(h) for k, h in holders.items()}

    def gain(i):
        new = keysets[i] & need
        return len(new), round(sum(weight[k] for k in new), 12)

    heap = []
    for i in {i for h in holders.values() for i in h}:
        n, w = gain(i)
        heap.append((-n, -w, i))
    heapq.heapify(heap)
    picked = []
    while need and heap:
        n, w, i = heapq.heappop(heap)
        now = gain(i)
        if now[0] == 0:
            continue
        if now != (-n, -w):  # stale: gains only shrink, so re-queue with the true one
            heapq.heappush(heap, (-now[0], -now[1], i))
            continue
        picked.append(i)
        need -= keysets[i]
    return picked


def _rarest_first(keysets, holders) -> list[int]:
    need = set(holders)
    order = sorted(holders, key=lambda k: (len(holders[k]), k))
    picked = []
    for k in order:
        if k not in need:
            continue
        i = max(holders[k], key=lambda i: (len(keysets[i] & need),
                                           -sum(len(holders[x]) for x in keysets[i] & need), -i))
        picked.append(i)
        need -= keysets[i]
    return picked


def _prune(picked: list[int], keysets, have) -> list[int]:
    """Drop redundant picks, latest first (the early, big picks are the least likely)."""
    count: dict = {}
    for i in picked:
        for k in keysets[i] - have:
            count[k] = count.get(k, 0) + 1
    kept = []
    for i in reversed(picked):
        mine = keysets[i] - have
        if all(count[k] > 1 for k in mine):
            for k in mine:
                count[k] -= 1
        else:
            kept.append(i)
    kept.reverse()
    return kept


@dataclass(frozen=True)
class StageRecord:
    """What one measured stage says: its peak, its breakdown if recorded, the run, and
    its times where it ran alone (``mcap.runner.alone``)."""
    peak: int
    breakdown: Optional[MemoryBreakdown]
    source: tuple[int, ...]
    times: Optional[StageTimes] = None


@dataclass
class Knowledge:
    """Per stage key: measured ok (with its peak) or proven oom, from finished runs.

    An ok run tells every one of its keys. An oom run has no per-stage peaks, so it
    proves a key oom only when every other key of that run is known ok (those stages fit
    elsewhere, so the remaining one ran out of memory; exact where a key's peak does not
    vary, as on the CPU). A failed run (crash, timeout) proves nothing: partitionings
    that need its keys are measured directly.
    """
    schedule: str
    stages: int  # entries of a balance (chunks, under a multi-stage schedule)
    virtual: int = 1  # chunks per rank (Setup.virtual_stages)
    ok: dict = field(default_factory=dict)    # key -> StageRecord
    oom: dict = field(default_factory=dict)   # key -> balance of the oom run that proved it
    tried: set = field(default_factory=set)   # keys of oom or failed runs (suspects while unknown)
    _oom_runs: list = field(default_factory=list)   # (balance, keys) of every oom run
    _waiting: dict = field(default_factory=dict)    # unknown key -> oom runs that hold it

    def __post_init__(self):
        _check(self.schedule)

    def add(self, run: Run) -> None:
        if len(run.balance) != self.stages:
            raise McapError(f"run of balance {list(run.balance)} has {len(run.balance)} stages; "
                            f"stage keys compare only within one setup of {self.stages} stages")
        keys = stage_keys(run.balance, self.schedule, self.virtual)
        if run.status == "ok":
            if run.peaks is None or len(run.peaks) != len(keys):
                raise McapError(f"ok run {list(run.balance)} needs one peak per stage")
            for s, k in enumerate(keys):
                bd = run.breakdown[s] if run.breakdown is not None else None
                times = run.times[s] if run.times is not None else None
                self._ok(k, StageRecord(int(run.peaks[s]), bd, tuple(run.balance), times))
        else:
            self.tried.update(keys)
            if run.status == "oom":
                self._oom_runs.append((tuple(run.balance), keys))
                j = len(self._oom_runs) - 1
                for k in self._settle(j):
                    self._waiting.setdefault(k, []).append(j)

    def _ok(self, k, record: StageRecord) -> None:
        old = self.ok.get(k)
        # Where a key's peak varies (CUDA), keep the highest: memory is a limit.
        if old is None or record.peak > old.peak:
            self.ok[k] = record if record.times is not None or old is None else \
                StageRecord(record.peak, record.breakdown, record.source, old.times)
        elif old.times is None and record.times is not None:
            self.ok[k] = StageRecord(old.peak, old.breakdown, old.source, record.times)
        for j in self._waiting.pop(k, ()):  # oom runs that may now name their stage
            self._settle(j)

    def add_stage(self, run: StageRun) -> None:
        """A stage run alone tells its own key: ok with its peak, or oom, proven at once
        (nothing else ran in its process); a failure proves nothing."""
        if len(run.balance) != self.stages:
            raise McapError(f"stage run of balance {list(run.balance)} has "
                            f"{len(run.balance)} stages; this setup has {self.stages}")
        k = stage_keys(run.balance, self.schedule, self.virtual)[run.stage]
        if run.status == "ok":
            if run.peak is None:
                raise McapError(f"ok stage run {list(run.balance)}[{run.stage}] needs its peak")
            self._ok(k, StageRecord(int(run.peak), run.breakdown, tuple(run.balance),
                                    run.times))
        elif run.status == "oom":
            self.oom.setdefault(k, tuple(run.balance))
            self.tried.add(k)
        else:
            self.tried.add(k)

    def _settle(self, j: int) -> list:
        """Prove oom run j's stage if it is its only one not known ok; its unknown keys."""
        balance, keys = self._oom_runs[j]
        unknown = [k for k in keys if k not in self.ok]
        if len(unknown) == 1:
            self.oom.setdefault(unknown[0], balance)
        return unknown if len(unknown) > 1 else []

    def known(self) -> set:
        return set(self.ok) | set(self.oom)

    def compose(self, balance: Sequence[int]) -> Optional[Run]:
        """The run of ``balance`` composed from known stages, or None when a stage is not
        known (measure it). ``composed=True``; its throughput is not known (None)."""
        balance = tuple(int(n) for n in balance)
        if len(balance) != self.stages:
            raise McapError(f"balance {list(balance)} has {len(balance)} stages; this setup "
                            f"has {self.stages}")
        keys = stage_keys(balance, self.schedule, self.virtual)
        for s, k in enumerate(keys):
            if k in self.oom:
                src = self.oom[k]
                return Run(balance, "oom", None, 0.0, composed=True,
                           error=f"stage {s} (layers {k[0]}..{k[1]}) ran out of memory in "
                                 f"run {list(src)}")
        records = [self.ok.get(k) for k in keys]
        if any(r is None for r in records):
            return None
        breakdown = None
        if all(r.breakdown is not None for r in records):
            breakdown = tuple(r.breakdown for r in records)
        # A key's times are its own work and its own boundaries' bytes wherever it sits.
        times = None
        if all(r.times is not None for r in records):
            times = tuple(r.times for r in records)
        return Run(balance, "ok", tuple(r.peak for r in records), 0.0,
                   breakdown=breakdown, composed=True, times=times)

    def suspect_keys(self, balance: Sequence[int]) -> list:
        """Keys of ``balance`` not known, that were in an oom or failed run."""
        return [k for k in self.unknown_keys(balance) if k in self.tried]

    def unknown_keys(self, balance: Sequence[int]) -> list:
        known = self.ok.keys() | self.oom.keys()
        return [k for k in stage_keys(balance, self.schedule, self.virtual) if k not in known]


def compose_all(runs: Iterable[Run], balances: Sequence[Sequence[int]], schedule: str,
                stages: int, virtual: int = 1) -> list[Optional[Run]]:
    """Compose each of ``balances`` from ``runs`` (None where a stage is unknown)."""
    k = Knowledge(schedule, stages, virtual)
    for r in runs:
        k.add(r)
    return [k.compose(b) for b in balances]


def run_from_stages(balance: Sequence[int], stages: Sequence[StageRun]) -> Run:
    """The measured run of ``balance`` from its own stages run alone (one per stage, in
    order): ok with their peaks (breakdowns and times where every stage has them), or oom
    / failed with the stages' messages, the status's first. Its seconds are the stages'
    own; its throughput is left to the caller's estimate (``Run.times``). How a run whose
    stages went out with other runs' is recorded (issue 42, ``Measurer.get_many``)."""
    balance = tuple(int(n) for n in balance)
    if len(stages) != len(balance) or [s.stage for s in stages] != list(range(len(balance))):
        raise McapError(f"balance {list(balance)} needs its {len(balance)} stages in order, "
                        f"got stages {[s.stage for s in stages]}")
    seconds = float(sum(s.seconds for s in stages))
    bad = [s for s in stages if s.status != "ok"]
    if not bad:
        breakdown = tuple(s.breakdown for s in stages) \
            if all(s.breakdown is not None for s in stages) else None
        times = tuple(s.times for s in stages) if all(s.times is not None for s in stages) \
            else None
        return Run(balance, "ok", tuple(int(s.peak) for s in stages), seconds,
                   breakdown=breakdown, times=times)
    status = "oom" if any(s.status == "oom" for s in bad) else "failed"
    messages = [s.error for s in bad if s.status == status and s.error]
    messages += [s.error for s in bad if s.status != status and s.error]
    return Run(balance, status, None, seconds,
               error="; ".join(dict.fromkeys(messages)) or "the run did not finish")
