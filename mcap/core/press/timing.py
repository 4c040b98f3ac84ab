"""When each op of one iteration runs, and what a swap costs in time (MPress III-D's cost
model; ``model.py``'s docstring, **Time**): the schedule's op order with each stage's
forward and backward durations (:func:`op_times`), each layer's live interval
(:func:`live_intervals`), and a swap's transfer beyond it. Pure."""
from __future__ import annotations

from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.partition import windows
from mcap.core.stagetime import op_order

BACKWARD_RATIO = 2.0  # backward time / forward time of a stage (no measurement of it yet)


def op_times(balance: Sequence[int], schedule: str, chunks: int,
             stage_forward: Sequence[float],
             stage_backward: Optional[Sequence[float]] = None) -> dict:
    """(kind, stage, micro-batch) -> (start, end) seconds of one iteration: the op order of
    ``mcap.core.stagetime`` (torch's) with real durations (forward per stage, backward x2 unless
    given)."""
    if stage_backward is None:
        stage_backward = [BACKWARD_RATIO * x for x in stage_forward]
    G = len(balance)
    orders = op_order(schedule, G, chunks)
    done, out, free, cursor = {}, {}, [0.0] * G, [0] * G
    while any(cursor[s] < len(orders[s]) for s in range(G)):
        moved = False
        for s in range(G):
            if cursor[s] >= len(orders[s]):
                continue
            kind, m = orders[s][cursor[s]]
            first = (kind == "F" and s == 0) or (kind == "B" and s == G - 1)
            dep = ("F", s - 1, m) if kind == "F" else ("B", s + 1, m)
            if not first and dep not in done:
                continue
            start = max(free[s], 0.0 if first else done[dep])
            dur = stage_forward[s] if kind == "F" else stage_backward[s]
            out[(kind, s, m)] = (start, start + dur)
            done[(kind, s, m)] = free[s] = start + dur
            cursor[s] += 1
            moved = True
        if not moved:
            raise McapError(f"schedule {schedule!r} deadlocks with {G} stages, {chunks} chunks")
    return out


def live_intervals(balance, schedule, chunks, forward) -> tuple[tuple[float, ...], ...]:
    """Per layer, per micro-batch: seconds from the end of its forward to the start of its
    backward on its stage (MPress III-D footnote 1)."""
    stage_fwd = [sum(forward[a:z + 1]) for a, z in windows(balance)]
    t = op_times(balance, schedule, chunks, stage_fwd)
    out = []
    for s, (a, z) in enumerate(windows(balance)):
        done_fwd = 0.0
        for l in range(a, z + 1):
            done_fwd += forward[l]
            after = stage_fwd[s] - done_fwd  # layers after l: backwarded before l
            out.append(tuple((t[("B", s, m)][0] + BACKWARD_RATIO * after)
                             - (t[("F", s, m)][0] + done_fwd) for m in range(chunks)))
    return tuple(out)


def swap_penalty(nbytes: int, bandwidth: float, live: Sequence[float]) -> float:
    """Seconds a swap adds over the micro-batches: transfer out and back beyond the live interval."""
    if nbytes == 0:
        return 0.0
    return _penalty(2.0 * nbytes / bandwidth, live)


def _penalty(transfer: float, live: Sequence[float]) -> float:
    return sum(max(0.0, transfer - x) for x in live) if transfer > 0 else 0.0


def _transfer(nbytes: float, bandwidth: float, host_bandwidth: float, measured: Sequence[float],
              l: int) -> float:
    """Seconds one micro-batch's swap of layer ``l`` takes out and back: measured as the
    runner does it (``PressStats.swap_seconds``: the copies, fresh allocations and the
    hooks' own work) where the profile has it, the part beyond the host copies carried to
    a d2d swap at its own bandwidth; else ``2 * nbytes / bandwidth``."""
    if nbytes <= 0:
        return 0.0
    copies = 2.0 * nbytes / bandwidth
    if not measured:
        return copies
    overhead = max(0.0, measured[l] - 2.0 * nbytes / host_bandwidth)
    return overhead + copies
