"""A run's record from its stages' results: the one place every runner turns gathered
``StageResult``s into a ``Run`` (the local runner, the torchrun runner and the torchrun
measurement, ``mcap.cli.spmd``)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from mcap.core.types import Run, Setup, StageTimes
from mcap.runner.protocol import ITERATIONS


def run_of(balance: tuple[int, ...], results: Sequence, seconds: float, setup: Setup, *,
           why: Optional[str] = None,
           estimate: Optional[Callable[[Optional[tuple]], Optional[float]]] = None) -> Run:
    """The Run of ``results`` (one StageResult per stage or device, in order): ok with the
    per-stage peaks (and breakdowns when every stage has one), or oom / failed with the
    stages' messages (the status's first, then the others, then ``why``: what the pool
    saw). ``estimate(times)``: the stages ran alone, so the throughput is estimated from
    their own times instead of read from the slowest stage's training window."""
    bad = [r for r in results if r.status != "ok"]
    if not bad and not why and len(results) == setup.stages:
        breakdown = (tuple(r.breakdown for r in results)
                     if all(r.breakdown is not None for r in results) else None)
        peaks = tuple(r.peak for r in results)
        if estimate is not None:
            times = stage_times(results)
            rate = estimate(times)
            return Run(balance, "ok", peaks, seconds, samples_per_second=rate,
                       breakdown=breakdown, times=times, estimated=rate is not None)
        window = max(r.seconds for r in results)
        return Run(balance, "ok", peaks, seconds,
                   samples_per_second=ITERATIONS * setup.batch_size / window
                   if window > 0 else None, breakdown=breakdown)
    status = "oom" if any(r.status == "oom" for r in bad) else "failed"
    messages = [r.error for r in bad if r.status == status and r.error]
    messages += [r.error for r in bad if r.status != status and r.error]
    if why:
        messages.append(why)
    error = "; ".join(dict.fromkeys(messages)) or "the run did not finish"
    return Run(balance, status, None, seconds, error=error)


def stage_times(results) -> Optional[tuple]:
    """Each StageResult's times as ``StageTimes`` (stage order), or None if one has none."""
    if any(r.times is None for r in results):
        return None
    return tuple(StageTimes(r.times[0], r.times[1], r.times[2], r.recv_bytes, r.send_bytes,
                            tuple(r.times[3]) if len(r.times) > 3 else (),
                            tuple(r.times[4]) if len(r.times) > 4 else ())
                 for r in results)
