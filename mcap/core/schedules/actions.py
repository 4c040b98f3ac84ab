"""A schedule's action list: the order in which each rank runs its chunks' forwards and
backwards, as torch's schedule object holds it (issue 39). Pure: no torch, no files.

torch keeps it as ``pipeline_order``: per rank, a list of actions such as ``0F3`` (stage 0,
forward of micro-batch 3), ``4B1`` (full backward), ``4I1`` / ``4W1`` (the backward for
inputs, then for weights: zero bubble), ``None`` (an idle slot) or an overlapped pair
``(0F7;7B3)OVERLAP_F_B`` (DualPipeV). ``mcap.runner.orders`` reads it off torch's own classes
(the same classes the runner runs); everything else reads this one form:

- the runner executes it (torch's schedule object does; a test checks the object's order is
  this one);
- the predictor counts, from it, what every chunk of a rank holds before and after each of
  the rank's actions (:func:`rank_events`);
- the teaching view replays it in time (:func:`replay`) and steps through it.

There is no formula per schedule here: in-flight counts, warm-up lengths and bubbles all
follow from the list.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import McapError

KINDS = ("F", "B", "I", "W")
# what a kind means, for legends
KIND_NAMES = {"F": "forward", "B": "backward", "I": "backward (inputs)", "W": "backward (weights)"}
MAX_ACTIONS = 1 << 20  # a bigger list is not a schedule mcap asked torch for

_ONE = re.compile(r"(\d{1,6})([FBIW])(\d{1,7})")
_PAIR = re.compile(r"\((.*)\)OVERLAP_F_B")


@dataclass(frozen=True)
class Action:
    stage: int       # torch's stage index: the chunk
    kind: str        # F, B, I or W
    microbatch: int

    def __str__(self) -> str:
        return f"{self.stage}{self.kind}{self.microbatch}"


Slot = tuple  # tuple[Action, ...]: () idle, one action, or an overlapped F and B


@dataclass(frozen=True)
class ActionList:
    """One schedule's order for G ranks, V chunks per rank and M micro-batches.

    ``order[r]``: rank r's slots in the order torch runs them (an empty slot is a step torch
    leaves idle; only the multi-stage schedules align their slots in time).
    ``placement[r]``: the chunks rank r holds. ``source``: who produced it (torch's class
    and version), so a list is never mixed across torch versions silently."""
    schedule: str
    stages: int
    virtual: int
    chunks: int
    order: tuple[tuple[Slot, ...], ...]
    placement: tuple[tuple[int, ...], ...]
    source: str = ""
    # Per rank, when the runtime lets go of what it holds (and so of the tensor): (kind F: a
    # forward's output sent, B: a backward's input gradient sent, O: a forward's output the
    # loop itself holds; chunk; micro-batch; how many of the rank's actions had run). Empty:
    # every send is held until the step ends and nothing else, as the multi-stage runtime.
    releases: tuple = ()

    @property
    def num_chunks(self) -> int:
        return self.stages * self.virtual

    def rank_of(self, chunk: int) -> int:
        for r, held in enumerate(self.placement):
            if chunk in held:
                return r
        raise McapError(f"chunk {chunk} is not held by any of {self.stages} ranks")

    def actions(self, rank: int) -> tuple[Action, ...]:
        """Rank ``rank``'s actions in the order it runs them (idle slots dropped; an
        overlapped pair in its sub-action order, as torch runs it)."""
        return tuple(a for slot in self.order[rank] for a in slot)

    def text(self, rank: int) -> str:
        return " ".join(_slot_text(s) for s in self.order[rank])


def _slot_text(slot: Slot) -> str:
    if not slot:
        return "-"
    if len(slot) == 1:
        return str(slot[0])
    return "(" + ";".join(str(a) for a in slot) + ")OVERLAP_F_B"


def parse_slot(text: Optional[str]) -> Slot:
    """A slot from torch's action text (``_Action.__repr__``): ``0F3``, ``None``/``-``/``""``
    (idle), ``(0F7;7B3)OVERLAP_F_B``. Communication and other actions (SEND_F, RECV_B,
    UNSHARD, RESHARD, REDUCE_GRAD) are not compute and give an empty slot."""
    if text is None:
        return ()
    text = str(text).strip()
    if text in ("", "-", "None"):
        return ()
    m = _PAIR.fullmatch(text)
    if m:
        out = []
        for part in m.group(1).split(";"):
            out.extend(parse_slot(part))
        return tuple(out)
    m = _ONE.fullmatch(text)
    if m:
        return (Action(int(m.group(1)), m.group(2), int(m.group(3))),)
    if re.fullmatch(r"\d{1,6}(UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)\d{0,7}",
                    text):
        return ()
    raise McapError(f"action {text[:40]!r} is not a schedule action (e.g. 0F3, 4I1, 2W0)")


def from_texts(schedule: str, stages: int, virtual: int, chunks: int,
               texts: dict, placement: Sequence[Sequence[int]], source: str = "",
               releases: Optional[dict] = None) -> ActionList:
    """An ActionList from torch's per-rank action texts, checked (:func:`check`)."""
    order = []
    for r in range(stages):
        if r not in texts:
            raise McapError(f"the action list has no rank {r} of {stages}")
        row = texts[r]
        if len(row) > MAX_ACTIONS:
            raise McapError(f"rank {r}'s action list has {len(row)} actions, over {MAX_ACTIONS}")
        slots = [parse_slot(t) for t in row]
        while slots and not slots[-1]:  # torch pads with trailing idle slots
            slots.pop()
        order.append(tuple(slots))
    rel = () if not releases else tuple(
        tuple((str(k), int(c), int(m), int(after)) for k, c, m, after in releases.get(r, ()))
        for r in range(stages))
    al = ActionList(schedule, stages, virtual, chunks, tuple(order),
                    tuple(tuple(int(c) for c in p) for p in placement), source, rel)
    check(al)
    return al


def check(al: ActionList) -> None:
    """Every chunk of every rank runs each micro-batch's forward once and its backward once
    (B, or I then W), on the rank that holds it, forward first."""
    n = al.num_chunks
    held = sorted(c for p in al.placement for c in p)
    if held != list(range(n)):
        raise McapError(f"the placement {al.placement} does not hold chunks 0..{n - 1} once each")
    for r in range(al.stages):
        seen: dict = {}
        for pos, a in enumerate(al.actions(r)):
            if a.kind not in KINDS or not 0 <= a.microbatch < al.chunks:
                raise McapError(f"rank {r}: action {a} is outside {al.chunks} micro-batches")
            if a.stage not in al.placement[r]:
                raise McapError(f"rank {r} runs {a} but holds chunks {al.placement[r]}")
            key = (a.stage, a.kind, a.microbatch)
            if key in seen:
                raise McapError(f"rank {r} runs {a} twice")
            seen[key] = pos
        for c in al.placement[r]:
            for m in range(al.chunks):
                f = seen.get((c, "F", m))
                b = seen.get((c, "B", m))
                i, w = seen.get((c, "I", m)), seen.get((c, "W", m))
                if f is None or (b is None and (i is None or w is None)) \
                        or (b is not None and i is not None):
                    raise McapError(f"rank {r}: chunk {c} micro-batch {m} lacks a forward or "
                                    "a backward in the action list")
                if (b if b is not None else i) < f or (w is not None and w < i):
                    raise McapError(f"rank {r}: chunk {c} micro-batch {m} runs its backward "
                                    "before its forward")


# --- what a rank holds, action by action ----------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One action of a rank and what each of the rank's chunks holds just *before* it:
    ``forwarded[c]`` micro-batches whose forward ran and whose backward (B or I) has not,
    ``inputs_done[c]`` whose I ran and whose W has not (zero bubble: what W needs),
    ``backward_done[c]`` whose backward finished (B or W), ``forward_done[c]`` whose forward
    ran; ``first_weight_grad``: this is the chunk's first action of the step that computes
    weight gradients (B or W: it allocates them; I computes only the inputs' gradients)."""
    index: int
    action: Action
    forwarded: tuple[int, ...]
    inputs_done: tuple[int, ...]
    backward_done: tuple[int, ...]
    forward_done: tuple[int, ...]
    first_weight_grad: bool


def rank_events(al: ActionList, rank: int) -> tuple[Event, ...]:
    """The rank's actions with what its chunks hold before each (in ``placement[rank]``
    order): the one count every consumer reads."""
    chunks = al.placement[rank]
    pos = {c: i for i, c in enumerate(chunks)}
    fwd = [0] * len(chunks)
    inp = [0] * len(chunks)
    done = [0] * len(chunks)
    fdone = [0] * len(chunks)
    grads = [False] * len(chunks)
    out = []
    for k, a in enumerate(al.actions(rank)):
        i = pos[a.stage]
        first = a.kind in ("B", "W") and not grads[i]
        out.append(Event(k, a, tuple(fwd), tuple(inp), tuple(done), tuple(fdone), first))
        if a.kind == "F":
            fwd[i] += 1
            fdone[i] += 1
        elif a.kind == "B":
            fwd[i] -= 1
            done[i] += 1
            grads[i] = True
        elif a.kind == "I":
            fwd[i] -= 1
            inp[i] += 1
        elif a.kind == "W":
            inp[i] -= 1
            done[i] += 1
            grads[i] = True
    return tuple(out)


def max_in_flight(al: ActionList) -> tuple[tuple[int, ...], ...]:
    """Per rank, per chunk it holds: the most micro-batches forwarded and not yet backward
    (B or I) at once, read off the list."""
    out = []
    for r in range(al.stages):
        best = [0] * len(al.placement[r])
        for e in rank_events(al, r):
            after = list(e.forwarded)
            if e.action.kind == "F":
                after[al.placement[r].index(e.action.stage)] += 1
            best = [max(b, x) for b, x in zip(best, after)]
        out.append(tuple(best))
    return tuple(out)


def max_held(al: ActionList) -> tuple[int, ...]:
    """Per rank: the most micro-batches whose activations it holds at once, over its chunks
    (forwarded and not backward, plus, under zero bubble, those waiting for W)."""
    out = []
    for r in range(al.stages):
        best = 0
        for e in rank_events(al, r):
            now = sum(e.forwarded) + sum(e.inputs_done)
            if e.action.kind == "F":
                now += 1
            best = max(best, now)
        out.append(best)
    return tuple(out)


# --- the list in time -----------------------------------------------------------------------

@dataclass(frozen=True)
class Timed:
    rank: int
    action: Action
    start: float
    end: float


def replay(al: ActionList, durations: Optional[dict] = None, *,
           chunk_durations: Optional[Sequence[dict]] = None,
           latency: float = 0.0) -> tuple[Timed, ...]:
    """Each rank runs its actions in list order, each as soon as the rank is free and its
    input is ready: F(c, m) after F(c-1, m) (on whatever rank holds c-1, plus ``latency``
    when that is another rank); B or I(c, m) after B or I(c+1, m) and after F(c, m); W(c, m)
    after I(c, m). ``durations``: seconds per kind (default F 1, B 2, I 1, W 1);
    ``chunk_durations[c]``: per-chunk overrides. An overlapped pair runs one after the other,
    as torch runs it. Raises McapError on a list that would deadlock."""
    base = {"F": 1.0, "B": 2.0, "I": 1.0, "W": 1.0, **(durations or {})}
    last = al.num_chunks - 1
    rank_of = {c: r for r, p in enumerate(al.placement) for c in p}
    seqs = [al.actions(r) for r in range(al.stages)]
    pos = [0] * al.stages
    free = [0.0] * al.stages
    end: dict = {}
    out: list[Timed] = []

    def ready(a: Action) -> Optional[float]:
        c, m = a.stage, a.microbatch
        if a.kind == "F":
            if c == 0:
                return 0.0
            t = end.get((c - 1, "F", m))
            return None if t is None else t + (latency if rank_of[c - 1] != rank_of[c] else 0.0)
        if a.kind == "W":
            return end.get((c, "I", m))
        f = end.get((c, "F", m))
        if f is None:
            return None
        if c == last:
            return f
        t = end.get((c + 1, "B", m), end.get((c + 1, "I", m)))
        if t is None:
            return None
        return max(f, t + (latency if rank_of[c + 1] != rank_of[c] else 0.0))

    remaining = sum(len(s) for s in seqs)
    while remaining:
        progressed = False
        for r in range(al.stages):
            while pos[r] < len(seqs[r]):
                a = seqs[r][pos[r]]
                t = ready(a)
                if t is None:
                    break
                d = (chunk_durations[a.stage] if chunk_durations else base).get(a.kind, base[a.kind])
                start = max(free[r], t)
                free[r] = start + d
                end[(a.stage, a.kind, a.microbatch)] = free[r]
                out.append(Timed(r, a, start, free[r]))
                pos[r] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [str(seqs[r][pos[r]]) for r in range(al.stages) if pos[r] < len(seqs[r])]
            raise McapError(f"the action list deadlocks: every rank waits ({', '.join(stuck)})")
    return tuple(sorted(out, key=lambda x: (x.start, x.rank)))


def makespan(timed: Sequence[Timed]) -> float:
    return max((t.end for t in timed), default=0.0)


def bubble(timed: Sequence[Timed], stages: int) -> float:
    """The fraction of the ranks' time idle within the iteration."""
    span = makespan(timed)
    if span <= 0:
        return 0.0
    busy = sum(t.end - t.start for t in timed)
    return max(0.0, 1.0 - busy / (span * stages))


# --- JSON-able form (a profile or sweep records the list its runs ran) ---------------------

def to_dict(al: ActionList) -> dict:
    return {"schedule": al.schedule, "stages": al.stages, "virtual": al.virtual,
            "chunks": al.chunks, "source": al.source,
            "placement": [list(p) for p in al.placement],
            "order": {str(r): [_slot_text(s) for s in al.order[r]] for r in range(al.stages)},
            "releases": {str(r): [list(x) for x in al.releases[r]]
                         for r in range(len(al.releases))}}


def from_dict(d: dict) -> ActionList:
    """The inverse of :func:`to_dict`, checked: a file's action list is data."""
    if not isinstance(d, dict):
        raise McapError("an action list must be an object")
    try:
        stages, virtual, chunks = (int(d["stages"]), int(d["virtual"]), int(d["chunks"]))
        order = d["order"]
        texts = {int(k): list(v) for k, v in order.items()}
        placement = [list(p) for p in d["placement"]]
        schedule, source = str(d["schedule"]), str(d.get("source", ""))
        releases = {int(k): [tuple(x) for x in v] for k, v in d.get("releases", {}).items()}
        for rel in releases.values():
            for x in rel:
                if len(x) != 4 or x[0] not in ("F", "B", "O"):
                    raise ValueError(f"release {list(x)[:4]}")
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise McapError(f"an action list is missing or has a bad field: {exc}") from None
    return from_texts(schedule, stages, virtual, chunks, texts, placement, source, releases)
