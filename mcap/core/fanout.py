"""How long a bag of stage-alone measurements takes on W workers (issue 42, "on paper"):
the tasks of a profiling plan and of a sweep's sample, each one stage measured alone in a
fresh process, sent to the first free worker in the order given, as the executors send
them (``mcap.runner.executors``: a GPU per task on Ray or Slurm, a slot locally).

Pure: no torch, no files. ``bench/bench_fanout.py`` feeds it measured per-stage times.

- :func:`stage_tasks` lists the tasks of a profiling plan (each run's stages, measured whole
  as ``profile`` does) and then the stage keys of a sample that the plan did not measure
  (``sweep`` composes every partitioning from the stage keys, ``mcap.core.profiling.cover``).
- :func:`makespan` is list scheduling over identical workers (Graham 1966: within 2 - 1/W
  of the optimum); :attr:`FanOut.bound` is the lower bound max(total / W, longest task).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Sequence

from mcap.core.errors import McapError
from mcap.core.profiling.cover import stage_keys


@dataclass(frozen=True)
class FanOut:
    tasks: int
    workers: int
    seconds: float  # wall time: each task to the first free worker, in the order given
    busy: float  # the tasks' seconds summed (the one-worker wall time)
    bound: float  # no schedule is shorter: max(busy / workers, the longest task)

    @property
    def speedup(self) -> float:
        return self.busy / self.seconds if self.seconds > 0 else 1.0


def makespan(seconds: Sequence[float], workers: int) -> FanOut:
    """Wall time of tasks of ``seconds`` on ``workers`` identical workers, each task to
    the first free worker in the order given."""
    if workers < 1:
        raise McapError(f"workers must be >= 1, got {workers}")
    if any(s < 0 for s in seconds):
        raise McapError("a task cannot take negative seconds")
    free = [0.0] * min(workers, max(1, len(seconds)))
    heapq.heapify(free)
    end = 0.0
    for s in seconds:
        start = heapq.heappop(free)
        heapq.heappush(free, start + s)
        end = max(end, start + s)
    busy = float(sum(seconds))
    longest = max(seconds, default=0.0)
    return FanOut(len(seconds), workers, end, busy, max(busy / workers, longest))


def stage_tasks(plan: Sequence[Sequence[int]], sample: Sequence[Sequence[int]],
                schedule: str = "gpipe") -> list[tuple]:
    """The stage keys measured, in order: every stage of every plan run (a profile measures
    each run whole), then each stage key of ``sample`` not measured by then (a sweep
    composes the rest)."""
    out = [k for b in plan for k in stage_keys(b, schedule)]
    seen = set(out)
    for b in sample:
        for k in stage_keys(b, schedule):
            if k not in seen:
                seen.add(k)
                out.append(k)
    return out


def task_seconds(keys: Sequence[tuple], stage_time: Callable[[int, int], float]) -> list[float]:
    """Each key's seconds: ``stage_time(first, last)`` of its layers."""
    return [float(stage_time(k[0], k[1])) for k in keys]
