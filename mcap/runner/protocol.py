"""Messages between the runner (parent) and its stage worker processes, pickled over a pipe.

Parent -> worker: :class:`Init` once, then :class:`Job` per run (or :class:`Stop`).
Worker -> parent: :class:`Hello` once (ready, or why not), then one :class:`Reply` per Job.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mcap.core.machine import Machine
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # importing mcap.core.press imports numpy: not on every runner's path
    from mcap.core.press.actions import PressPlan
from mcap.core.types import MemoryBreakdown, ModelInfo, Setup

ITERATIONS = 2  # issue 4: each run trains 2 full iterations after building the stages


@dataclass(frozen=True)
class Init:
    spec: str
    setup: Setup
    rank: int
    world: int
    init_file: Optional[str]  # FileStore rendezvous of the process group; None: no group
    pg_timeout: float
    # Stages run alone (mcap.runner.alone): each job names the stage this process runs,
    # over a fake process group of the run's stage count; rank is the worker's slot
    # (which GPU it uses), not a stage index.
    alone: bool = False


@dataclass(frozen=True)
class PressJob:
    """What a stage process needs to apply a plan to one run: the plan, the folder where
    the stages' d2d channels listen (the pool's private temp folder), and the run id that
    keeps one run's channels apart from the next's."""
    plan: PressPlan
    channel_dir: Optional[str] = None
    run_id: int = 0

    def actions(self, rank: int) -> list:
        return list(self.plan.stages[rank])

    def d2d_senders(self, rank: int) -> list[int]:
        """Stages that move activations into stage ``rank``'s memory."""
        return sorted({s for s, stage in enumerate(self.plan.stages) if s != rank
                       and any(a.action == "d2d" and a.target == rank for a in stage)})


@dataclass(frozen=True)
class Job:
    run_id: int
    balance: tuple[int, ...]
    press: Optional[PressJob] = None  #: an MPress plan to apply
    stage: Optional[int] = None  #: alone: the stage of ``balance`` to run (Init.alone)


@dataclass(frozen=True)
class Stop:
    pass


@dataclass(frozen=True)
class Hello:
    rank: int
    pid: int
    info: Optional[ModelInfo]
    error: Optional[str] = None  # the worker could not get ready (bad user model, ...)
    is_bad_input: bool = False  # error is an McapError (the caller's input), not a crash
    machine: Optional[Machine] = None  # this process's fingerprint, threads as pinned


@dataclass(frozen=True)
class StageResult:
    """One stage's (one device's) outcome. ``peak`` counts from the window's start: stage
    built, optimizer created (issue 4, Runner)."""
    stage: int
    status: str  # "ok" | "oom" | "failed"
    peak: Optional[int] = None
    breakdown: Optional[MemoryBreakdown] = None
    seconds: float = 0.0  # the 2 training iterations, in this process
    error: Optional[str] = None
    # the running peak after each iteration: shows whether iteration 2 reached a new peak
    iteration_peaks: tuple[int, ...] = ()
    held_before: int = 0  # bytes held before the stage was built (0: nothing leaked)
    # engine hybrid: the whole batch's loss per iteration (on the last stage's device 0,
    # for checking a plan trains as one process would), and what the device left replicated
    losses: tuple[float, ...] = ()
    note: Optional[str] = None
    # CPU seconds this process spent over the same iterations (all its threads): the
    # stage's own work without the time it waited for a core or a neighbour, which on
    # CPU stage processes sharing cores is the one time figure that does not depend on
    # the load (bench/bench_press_time.py); 0.0 where the engine does not record it.
    cpu_seconds: float = 0.0
    # A stage run alone (mcap.runner.alone.StageTimer): seconds of each micro-batch's
    # forward and backward and of the optimizer step, per iteration, and the bytes of one
    # micro-batch's activation it receives and sends (what crosses its boundaries);
    # None / 0 where not recorded.
    times: Optional[tuple] = None
    recv_bytes: int = 0
    send_bytes: int = 0
    # Where it ran, set by a cluster executor (issue 42, mcap.runner.executors): the node's
    # name and the fingerprint of the machine its fresh process measured on; None locally
    # (the pool's own machine).
    node: Optional[str] = None
    machine: Optional[Machine] = None


@dataclass(frozen=True)
class Reply:
    run_id: int
    rank: int
    results: tuple[StageResult, ...]  # one per stage this worker ran (all G for torchgpipe)
