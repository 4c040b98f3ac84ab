"""A fresh stage process per measurement, forked by a zygote that a long-lived task worker
keeps (issue 42: Ray's overhead per task).

A Ray CPU task used to get a Ray worker of its own (``max_calls=1``): every measurement
paid Ray's worker start (about 0.5 s) and a torch import (1.5-2 s) before its stage was
built. Now a CPU task's Ray worker stays (Ray reuses it for the next task) and keeps a
zygote (:mod:`mcap.runner.zygote`, the local pool's) with torch imported and the model
built once; each measurement runs in a process forked from it for that measurement alone
(its Init, one Job, then it ends), exactly as the local pool's forked stage processes start.
So the measurement's truth holds (a fresh process, memtrack installed before the stage is
built, the stage process's environment), and a sweep over Ray reads the local sweep's
peaks to the byte (``tests/runner/executors/test_ray.py``).

Faults: the zygote dies with the worker (``PR_SET_PDEATHSIG``) and the stage process with
the zygote, so a killed Ray worker leaves nothing running and its task is lost and sent
again (``mcap.runner.executors.remote``). A stage process that dies mid-run raises here,
which loses the task the same way. Where the zygote will not fork (it is not
single-threaded after its imports), each measurement spawns ``python -m
mcap.runner.worker`` instead. CUDA tasks keep a fresh Ray worker each (a CUDA context does
not survive a fork; Ray's own default for GPU tasks).

Nothing here imports torch: the task worker only supervises.
"""
from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Pipe, wait
from pathlib import Path
from typing import Optional

from mcap.runner.zygote import Zygote

WARM_ENV = "MCAP_WARM_ZYGOTE"  # set in a CPU task worker's environment: keep a zygote
START_SECONDS = 300.0  # the zygote's imports and a stage process's Hello, at most
_REPO = Path(__file__).resolve().parents[3]

# This worker process's zygote: (what it prepared, or None before the first task; the
# zygote; its folder).
_held: Optional[tuple[Optional[tuple], Zygote, str]] = None


def _env() -> dict:
    from mcap.runner.early import ZYGOTE_ENV
    env = dict(os.environ)
    env.pop(WARM_ENV, None)
    env.update(ZYGOTE_ENV)
    return env


def start() -> None:
    """Start this worker's zygote now, unprepared (a CPU task worker's set-up hook: its
    torch import runs while the worker waits for its first task; a worker that measures
    nothing, ``$MCAP_NO_PRELOAD``, starts none)."""
    if not os.environ.get("MCAP_NO_PRELOAD"):
        _start()


def _start() -> None:
    global _held
    if _held is None or _held[1].dead:
        folder = tempfile.mkdtemp(prefix="mcap-warm-")
        atexit.register(stop)
        _held = (None, Zygote(_env(), str(_REPO), os.path.join(folder, "zygote.log")), folder)


def _zygote_for(spec: str, setup) -> Optional[Zygote]:
    """The worker's zygote, prepared for this model and setup (a zygote prepared for
    another one, or gone, is replaced); None where it refuses to fork."""
    global _held
    key = (spec, setup)
    if _held is not None and (_held[1].dead or _held[1].refused
                              or _held[0] not in (None, key)):
        stop()
    _start()
    prepared, z, folder = _held
    if prepared is None:
        z.prepare(spec, setup)
        _held = (key, z, folder)
    z.wait_for(lambda: z.ready is not None, START_SECONDS)
    return None if z.refused or z.dead else z


def stop() -> None:
    global _held
    if _held is not None:
        _, z, folder = _held
        _held = None
        z.close()
        shutil.rmtree(folder, ignore_errors=True)


def _recv(conn, proc, zygote: Optional[Zygote], what: str, timeout: float):
    """The stage process's next message; RuntimeError when it died or went silent."""
    end = time.monotonic() + timeout
    while True:
        watched = [conn] + ([zygote.conn] if zygote is not None and not zygote.dead else [])
        left = end - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"the stage process sent no {what} within {timeout:g} s")
        ready = wait(watched, min(left, 1.0))
        if conn in ready:
            try:
                return conn.recv()
            except (EOFError, OSError):
                raise RuntimeError(f"the stage process ended before its {what}: "
                                   f"{_exit_of(proc, zygote)}") from None
        if zygote is not None and zygote.conn in ready:
            zygote.pump()
        if proc is not None and proc.poll() is not None and not conn.poll(0):
            raise RuntimeError(f"the stage process ended before its {what}: "
                               f"exit {proc.returncode}")


def _exit_of(proc, zygote) -> str:
    if proc is not None:
        try:
            return f"exit {proc.wait(timeout=5)}"
        except subprocess.TimeoutExpired:
            return "still running"
    return "its zygote reaped it" if zygote is not None else "gone"


def run(kind: str, spec: str, setup, job, node: str, run_timeout: float = 7 * 86400.0):
    """One task (``probe`` or ``measure``) in a fresh stage process forked for it; returns
    :class:`mcap.runner.fresh.Outcome` (as :func:`mcap.runner.fresh.measure` would in a
    fresh process of its own)."""
    import dataclasses

    from mcap.runner.fresh import Outcome, init_of
    from mcap.runner.protocol import Reply, StageResult, Stop

    start_time = time.monotonic()
    zygote = _zygote_for(spec, setup)
    parent_end, child_end = Pipe(duplex=True)
    log = os.path.join(_held[2], "stage.log")  # the zygote's own folder (mkdtemp, 0700)
    proc, request = None, None
    if zygote is not None:
        request = zygote.fork(child_end, log)
    else:
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mcap.runner.worker", str(child_end.fileno())],
                pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=_env(), cwd=str(_REPO))
    child_end.close()
    try:
        parent_end.send(init_of(spec, setup))
        hello = _recv(parent_end, proc, zygote, "Hello", START_SECONDS)
        pid = hello.pid
        took = lambda: time.monotonic() - start_time  # noqa: E731
        if hello.error and hello.is_bad_input:
            return Outcome(None, None, None, node, pid, took(), bad_input=hello.error)
        if hello.error:
            result = StageResult(job.stage or 0 if job else 0, "failed", node=node,
                                 error=f"on node {node}: the stage process could not start: "
                                       f"{hello.error}")
            return Outcome(result if job else None, None, None, node, pid, took())
        if kind == "probe":
            return Outcome(None, hello.machine, hello.info, node, pid, took())
        parent_end.send(job)
        reply: Reply = _recv(parent_end, proc, zygote, "result", run_timeout)
        parent_end.send(Stop())
        result = dataclasses.replace(reply.results[0], node=node, machine=hello.machine)
        if result.status == "failed":
            result = dataclasses.replace(result, error=f"on node {node}: {result.error}")
        return Outcome(result, hello.machine, hello.info, node, pid, took())
    finally:
        parent_end.close()  # a stage process waiting for its next job ends on this
        if request is not None:  # gone before the next task's fork: nothing runs beside it
            got = zygote.forked.get(request)
            pid = got.pid if got is not None else None
            if pid and not zygote.wait_for(lambda: pid in zygote.exited, 10):
                zygote.kill([pid])
        if proc is not None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
