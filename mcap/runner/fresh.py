"""One stage-alone measurement in this process, a fresh one (issue 42): the body of a Ray
task or a Slurm array task (``mcap.runner.executors``).

A stage's truth is what a fresh process of that stage reaches (DESIGN.md, "Where it
runs"). The local pool keeps its stage processes and gives every run a clean slate; a task
of a cluster executor gets a process of its own for one measurement (a Ray GPU task's
worker, ``max_calls=1``; one Slurm array task each; a Ray CPU task forks one instead,
``mcap.runner.executors.warm``), started with the stage process's environment
(``mcap.runner.machine.process_env``: the setup's threads, malloc's fixed thresholds), and
does here what a spawned stage worker does (:mod:`mcap.runner.worker`): pin the threads,
install the CPU tracker before any model exists, build the model uncounted, run the job.
So its peak is the pool's to the byte (``tests/runner/executors``).

:func:`preload` imports what a measurement needs before the task arrives (Ray's
``worker_process_setup_hook``: a worker started ahead of its task pays the torch import
while the previous task still runs). :func:`probe` reports the model's layers and the
machine's fingerprint the way a stage worker's Hello does, without measuring.
"""
from __future__ import annotations

import gc
import os
import socket
import time
import traceback
from dataclasses import dataclass
from typing import Optional

from mcap.core.machine import Machine
from mcap.core.types import ModelInfo, Setup
from mcap.runner.protocol import Init, Job, StageResult


@dataclass(frozen=True)
class Outcome:
    """What a task returns to the driver (pickled): the stage's result, or ``bad_input``
    (an McapError: the caller's input, never retried), where it ran and on what."""
    result: Optional[StageResult]
    machine: Optional[Machine]
    info: Optional[ModelInfo]
    node: str
    pid: int
    seconds: float  # the whole task in this process: start-up, build and the run
    bad_input: Optional[str] = None


def node_name() -> str:
    """This machine as a scheduler names it: Slurm's node name, else the host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def preload() -> None:
    """Import torch and the stage's modules now (a Ray worker's setup hook; a worker that
    measures nothing, ``$MCAP_NO_PRELOAD``, skips it)."""
    if os.environ.get("MCAP_NO_PRELOAD"):
        return
    from mcap.runner import zygote
    import importlib
    for name in zygote.PRELOAD:
        importlib.import_module(name)


def init_of(spec: str, setup: Setup) -> Init:
    """A stage process's Init for one task: rank 0 of a world of one, alone."""
    # rank 0 of a world of one slot: a GPU task sees the one GPU it was given as device 0
    return Init(spec, setup, 0, 1, None, pg_timeout=300.0, alone=True)


def probe(spec: str, setup: Setup, node: Optional[str] = None) -> Outcome:
    """The model's layers and this machine's fingerprint as a stage process sees them."""
    start = time.monotonic()
    node = node or node_name()
    from mcap.core.errors import McapError
    from mcap.runner import worker
    from mcap.runner.machine import collect_here
    try:
        _, info = worker._start(init_of(spec, setup))
    except McapError as exc:
        return Outcome(None, None, None, node, os.getpid(), time.monotonic() - start,
                       bad_input=str(exc))
    return Outcome(None, collect_here(setup), info, node, os.getpid(),
                   time.monotonic() - start)


def measure(spec: str, setup: Setup, job: Job, node: Optional[str] = None) -> Outcome:
    """Run ``job`` (one stage of a balance, or one device of a plan, alone) in this process.
    A failure is the result's status; bad input (an unknown model) is ``bad_input``."""
    start = time.monotonic()
    node = node or node_name()
    from mcap.core.errors import McapError
    from mcap.runner import worker
    from mcap.runner.machine import collect_here
    init = init_of(spec, setup)
    try:
        resident, info = worker._start(init)
    except McapError as exc:
        return Outcome(None, None, None, node, os.getpid(), time.monotonic() - start,
                       bad_input=str(exc))
    except Exception as exc:  # noqa: BLE001 (a broken environment on this node: its record)
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        result = StageResult(job.stage or 0, "failed", node=node,
                             error=f"on node {node}: the stage process could not start: {text}")
        return Outcome(result, None, None, node, os.getpid(), time.monotonic() - start)
    gc.collect()
    gc.freeze()  # as a stage worker does before its first run (mcap.runner.worker.serve)
    machine = collect_here(init.setup)
    results = worker._run(init, resident, job)
    import dataclasses
    result = dataclasses.replace(results[0], node=node, machine=machine)
    if result.status == "failed":
        result = dataclasses.replace(result, error=f"on node {node}: {result.error}")
    return Outcome(result, machine, info, node, os.getpid(), time.monotonic() - start)
