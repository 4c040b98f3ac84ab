"""A partitioning's throughput from its stages' own times (issue 25, item 2). Pure.

Stages measured alone (``mcap.runner.alone``) record the seconds of each micro-batch's
forward and backward and of the optimizer step (``StageTimes``). A pipeline run of those
stages is then replayed here, event by event, in the schedule's own op order (what
``torch.distributed.pipelining``'s ``ScheduleGPipe`` / ``Schedule1F1B`` run on each rank;
tests/core/test_stagetime.py checks :func:`op_order` against their ``pipeline_order``):

- stage s runs its ops one after another: iteration 1's forwards and backwards in the
  schedule's order, its optimizer step, then iteration 2's; what the schedule spent around
  them (``StageTimes.other``: receives, sends, the loss, its own Python) is spread over an
  iteration's forwards and backwards in proportion;
- a forward of micro-batch m on stage s > 0 starts once stage s - 1 finished it and the
  activation crossed the link (``Link``: a latency per message plus bytes over the
  measured bandwidth); a backward on stage s < G - 1 once stage s + 1 finished it and the
  gradient crossed back (the same bytes); sends are asynchronous, as the runtime's are.
  Where the crossing itself runs on the compute the stages share (gloo between processes
  of one host copies through the kernel; IPC copies of stages on one GPU), it is work of
  the receiving op rather than a delay (``Link.on_compute``);
- stages that share compute (CPU stage processes on fewer cores than stages; stages on
  one GPU) share it: while n of them compute on ``Link.slots`` slots each runs at
  min(1, slots / n) of its own speed (processor sharing, how the OS and the GPU's
  time-slicing divide them). ``slots`` 0: every stage has a device of its own;
- stages computing side by side also slow each other's ops down (shared caches and memory
  bandwidth, turns on a core that refill its caches): with n computing, each runs at
  1 / ``Link.corun[n - 1]`` of that speed, factors measured on the machine with the
  model's own layers (``mcap.runner.corun``; empty: none measured, 1).

The estimate is the samples of all iterations over the makespan, as a concurrent run's
``samples_per_second`` is (2 x batch over the slowest stage's window). Its error against
concurrent runs is measured, not assumed: ``bench/bench_stage_times.py``, BENCHMARKS.md.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core import fields
from mcap.core.errors import McapError
from mcap.core.types import SCHEDULES, StageTimes


@dataclass(frozen=True)
class Link:
    """What crossing a stage boundary costs, as measured on the machine
    (``mcap.runner.link``): seconds per message plus bytes over ``bytes_per_second``.
    ``how`` names the transport (gloo, nccl, ipc, ...); ``slots``: how many stages can
    compute at once (0: each has its own device); ``corun``: with n stages computing at
    once, how many times its own seconds an op takes (``corun[n - 1]``, the last for more;
    measured by ``mcap.runner.corun``; empty: 1)."""
    latency: float
    bytes_per_second: float
    how: str = ""
    slots: int = 0
    corun: tuple = ()

    def slowdown(self, n: int) -> float:
        """How many times its own seconds an op takes with ``n`` stages computing."""
        if not self.corun or n < 1:
            return 1.0
        return float(self.corun[min(n, len(self.corun)) - 1])

    def seconds(self, nbytes: int) -> float:
        if nbytes <= 0:
            return 0.0
        return self.latency + nbytes / self.bytes_per_second

    @property
    def on_compute(self) -> bool:
        """Whether a crossing is work of the devices the stages compute on: gloo between
        processes of one host copies through the kernel on its cores, IPC and host copies
        of stages sharing a GPU run on that GPU; NCCL between GPUs of their own does not."""
        return self.how in ("gloo", "ipc", "host", "store")


# A sweep's key (file and store) for the link its stage-time estimates were made over: what
# the dashboard says a hollow point's throughput rests on (:func:`link_to_json`).
KEY = "stage_time_link"


def link_to_json(link: Link) -> dict:
    """``link`` as JSON numbers and texts (a sweep's :data:`KEY`)."""
    return {"how": link.how, "latency": link.latency, "bytes_per_second": link.bytes_per_second,
            "slots": link.slots, "corun": [float(x) for x in link.corun]}


MAX_CORUN = 1024  # co-run factors a link may carry (one per number of stages computing)


def read_link(d, r: fields.Reader, where: str = "link") -> Link:
    """A Link in :func:`link_to_json`'s form, checked as every file's fields are
    (``mcap.core.fields``): the transport a plain word, latency seconds, a positive finite
    bandwidth (bytes/s, beyond ``Reader.num``'s range), compute slots, and positive co-run
    factors; anything else raises ``r``'s error naming the field."""
    d = r.obj(d, where)
    how = r.str_(r.need(d, "how", where), f"{where}.how")
    if not re.fullmatch(r"[A-Za-z0-9_.-]{0,40}", how):
        raise r.fail(f"{where}.how", f"expected a transport's name, found {fields.show(how)}")
    bandwidth = r.need(d, "bytes_per_second", where)
    try:
        ok = not isinstance(bandwidth, bool) and isinstance(bandwidth, (int, float)) \
            and math.isfinite(bandwidth) and bandwidth > 0
    except OverflowError:  # an integer beyond any float
        ok = False
    if not ok:
        raise r.fail(f"{where}.bytes_per_second",
                     f"expected a positive finite number, found {fields.show(bandwidth)}")
    factors = r.lst(d.get("corun", []), f"{where}.corun")
    if len(factors) > MAX_CORUN:
        raise r.fail(f"{where}.corun", f"{len(factors):,} factors, more than {MAX_CORUN:,}")
    corun = tuple(r.num(x, f"{where}.corun[{k}]") for k, x in enumerate(factors))
    if any(x <= 0 for x in corun):
        raise r.fail(f"{where}.corun", "a factor of 0: every factor must be positive")
    return Link(r.num(r.need(d, "latency", where), f"{where}.latency"), float(bandwidth), how,
                r.int_(d.get("slots", 0), f"{where}.slots", low=0, high=MAX_CORUN), corun)


def link_from_json(d) -> Optional[Link]:
    """:func:`read_link` of a sweep's :data:`KEY`; None when absent or unreadable (the
    page then names no link)."""
    try:
        return read_link(d, fields.Reader(KEY, McapError))
    except McapError:
        return None


def describe(link: Link) -> str:
    """One line for a reader: the transport, latency, bandwidth, slots and co-run factors."""
    share = (f"{link.slots} compute slot{'s' if link.slots != 1 else ''} shared"
             if link.slots else "a device per stage")
    corun = (", co-run factors " + " / ".join(f"{x:.2f}" for x in link.corun[:8])
             + (" ..." if len(link.corun) > 8 else "")) if link.corun else ""
    return (f"{link.how or 'link'} {1e6 * link.latency:.0f} us + "
            f"{link.bytes_per_second / 1e9:.2f} GB/s per crossing, {share}{corun}")


def op_order(schedule: str, stages: int, chunks: int) -> list[list[tuple[str, int]]]:
    """Per stage, its ops of one iteration in the order the schedule runs them:
    ("F", m) a forward, ("B", m) a backward of micro-batch m."""
    if schedule not in SCHEDULES:
        raise McapError(f"schedule {schedule!r} is not one of {', '.join(SCHEDULES)}")
    if stages < 1 or chunks < 1:
        raise McapError(f"need at least one stage and one micro-batch, got {stages} and "
                        f"{chunks}")
    out = []
    for s in range(stages):
        if schedule == "gpipe":
            out.append([("F", m) for m in range(chunks)] + [("B", m) for m in range(chunks)])
            continue
        # Schedule1F1B: stage s warms up with min(M, G - s) forwards, then one backward
        # and one forward at a time, then the remaining backwards.
        warm = min(chunks, stages - s)
        ops = [("F", m) for m in range(warm)]
        f, b = warm, 0
        while True:
            ops.append(("B", b))
            b += 1
            if f == chunks:
                break
            ops.append(("F", f))
            f += 1
        ops += [("B", m) for m in range(b, chunks)]
        out.append(ops)
    return out


def _programs_order(schedule: str, G: int, chunks: int, actions) -> list:
    """Per rank, its ops of one iteration: (kind, micro-batch, chunk), in the order it runs
    them: the action list's (``mcap.core.schedules.actions``) when given, else, for the two
    one-stage schedules, :func:`op_order` (which a test checks against torch's traced
    loops)."""
    if actions is not None:
        if actions.stages != G or actions.chunks != chunks:
            raise McapError(f"the action list is for {actions.stages} ranks and "
                            f"{actions.chunks} micro-batches, the times for {G} and {chunks}")
        return [[(a.kind, a.microbatch, a.stage) for a in actions.actions(r)] for r in range(G)]
    if schedule not in SCHEDULES:
        raise McapError(f"schedule {schedule!r} needs its action list to be replayed")
    return [[(kind, m, s) for kind, m in ops] for s, ops in enumerate(op_order(schedule, G, chunks))]


def makespan(times: Sequence[StageTimes], schedule: str, chunks: int, link: Link,
             actions=None) -> float:
    """Long because: it is one discrete-event replay (checks, each rank's program, then the
    event loop whose ``crossing`` and ``arrival`` read the loop's own state).

    Seconds from the start until every rank has finished its last optimizer step, for
    every iteration ``times`` recorded (module docstring). ``actions``: the schedule's
    action list (needed for a multi-stage schedule, whose ranks hold several chunks: a
    rank's forward and backward times are in its list's order, and a crossing happens only
    between chunks on different ranks)."""
    G = len(times)
    if G == 0:
        raise McapError("no stage times to estimate from")
    iterations = {len(t.forward) for t in times} | {len(t.backward) for t in times}
    if len(iterations) != 1 or 0 in iterations:
        raise McapError("every stage needs the times of the same iterations")
    its = iterations.pop()
    order = _programs_order(schedule, G, chunks, actions)
    n = max((c for ops in order for _, _, c in ops), default=0) + 1
    rank_of = {c: r for r, ops in enumerate(order) for _, _, c in ops}
    for s, t in enumerate(times):
        fw = sum(1 for k, _, _ in order[s] if k == "F")
        if any(len(f) != fw for f in t.forward) or any(len(b) != len(order[s]) - fw
                                                       for b in t.backward):
            raise McapError(f"stage {s} recorded times for another number of micro-batches "
                            f"than {chunks}")

    def boundary(rank: int, sends: bool) -> float:
        """Bytes of one crossing out of (into) ``rank``, shared over its chunks that cross."""
        ops = {c for _, _, c in order[rank]}
        k = sum(1 for c in ops if (c + 1 < n and rank_of[c + 1] != rank) if sends) \
            if sends else sum(1 for c in ops if c > 0 and rank_of[c - 1] != rank)
        total = times[rank].send_bytes if sends else times[rank].recv_bytes
        return total / k if k else 0.0

    # Each rank's program: (kind, iteration, micro-batch, seconds of its own work, chunk)
    programs = []
    for s, t in enumerate(times):
        prog = []
        for it in range(its):
            # The schedule's other work of the iteration (receives, sends, the loss, its
            # Python) goes with the forwards and backwards, in proportion to them.
            work = sum(t.forward[it]) + sum(t.backward[it])
            scale = 1.0 + (t.other[it] / work if it < len(t.other) and work > 0 else 0.0)
            f_at = b_at = 0
            for kind, m, c in order[s]:
                if kind == "F":
                    seconds, f_at = t.forward[it][f_at], f_at + 1
                elif G == n:  # one chunk per rank: backwards by micro-batch, as recorded
                    seconds = t.backward[it][m]
                else:
                    seconds, b_at = t.backward[it][b_at], b_at + 1
                prog.append((kind, it, m, float(seconds) * scale, c))
            step = t.step[it] if it < len(t.step) else 0.0
            prog.append(("S", it, 0, float(step), -1))
        programs.append(prog)
    done: dict = {}  # (chunk, kind, it, m) -> finish time (kind B for I too)
    pc = [0] * G  # next op of each rank
    running: dict = {}  # rank -> seconds of work left
    now = 0.0
    slots = link.slots if 0 < link.slots < G else 0

    def crossing(s: int) -> float:
        """Seconds the input of rank s's next op takes to cross to it (0: none)."""
        kind, _, _, _, c = programs[s][pc[s]]
        if kind == "F" and c > 0 and rank_of[c - 1] != s:
            return link.seconds(int(boundary(rank_of[c - 1], True)))
        if kind in ("B", "I") and 0 <= c < n - 1 and rank_of[c + 1] != s:
            return link.seconds(int(boundary(rank_of[c + 1], False)))
        return 0.0

    def arrival(s: int):
        """When rank s's next op may start (None: its input is not even computed). A
        crossing on the compute (``Link.on_compute``) is work of the op, not a delay."""
        kind, it, m, _, c = programs[s][pc[s]]
        delay = 0.0 if link.on_compute else crossing(s)
        if kind == "F" and c > 0:
            src = done.get((c - 1, "F", it, m))
            return None if src is None else src + (delay if rank_of[c - 1] != s else 0.0)
        if kind in ("B", "I") and 0 <= c < n - 1:
            src = done.get((c + 1, "B", it, m))
            return None if src is None else src + (delay if rank_of[c + 1] != s else 0.0)
        return now

    while True:
        waits = []
        for s in range(G):
            if s in running or pc[s] >= len(programs[s]):
                continue
            at = arrival(s)
            if at is not None and at <= now + 1e-15:
                running[s] = programs[s][pc[s]][3] + (crossing(s) if link.on_compute else 0.0)
            elif at is not None:
                waits.append(at)
        if not running:
            if not waits:
                break
            now = min(waits)
            continue
        rate = (1.0 if not slots else min(1.0, slots / len(running))) \
            / link.slowdown(len(running))
        step = min(running.values()) / rate
        if waits:
            step = min(step, min(waits) - now)
        now += step
        for s in list(running):
            running[s] -= step * rate
            if running[s] <= 1e-12:
                kind, it, m, _, c = programs[s][pc[s]]
                done[(c, "B" if kind == "I" else kind, it, m)] = now
                pc[s] += 1
                del running[s]
    if any(pc[s] < len(programs[s]) for s in range(G)):  # pragma: no cover (a cycle)
        raise McapError("the schedule could not be replayed from these stage times")
    return now


def samples_per_second(times: Optional[Sequence[StageTimes]], setup, link: Link,
                       actions=None) -> Optional[float]:
    """The estimated throughput of a run of ``times`` under ``setup`` (its batch size,
    schedule and micro-batches) over ``link``; None without times. ``actions``: the
    schedule's action list (:func:`makespan`)."""
    if not times:
        return None
    span = makespan(times, setup.schedule, setup.chunks, link, actions)
    its = len(times[0].forward)
    return its * setup.batch_size / span if span > 0 else None
