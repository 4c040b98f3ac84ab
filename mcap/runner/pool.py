"""The parent side: a pool of persistent worker processes and one run at a time over it.

Workers are plain subprocesses (``python -m mcap.runner.worker``), not multiprocessing
children, so the caller's ``__main__`` (a Streamlit script, pytest) is never re-imported.
Each gets one end of a socket pair. A run sends every worker a Job and waits for every
Reply up to the timeout. Any run that does not end cleanly everywhere — a stage out of
memory while its neighbours wait in a receive, a killed process, a hang — ends with the
whole pool killed and a fresh one started at once in the background, so the next run finds
it (almost) ready.

On CPU setups the workers are forked by a zygote (:mod:`mcap.runner.zygote`) that has
imported torch once and built the model once, so a pool's start costs one torch import,
not one per stage, and a restart (after an OOM, a crash, a hang) costs a fork per stage;
the zygote lives as long as the pool. CUDA setups (a CUDA context does not survive fork) and
``MCAP_STAGE_START=spawn`` start each worker as its own ``python -m mcap.runner.worker``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Pipe, wait
from pathlib import Path
from typing import Optional

from mcap.core.errors import McapError
from mcap.runner.protocol import Hello, Init, Job, Reply, StageResult, Stop
from mcap.core.machine import Machine
from mcap.core.types import ModelInfo, Setup
from mcap.runner.machine import process_env
from mcap.runner.slots import SlotDispatch
from mcap.runner.workers import Forked, Spawned
from mcap.runner.zygote import Zygote

# "spawn": start every worker as its own process even where a zygote could fork it (for
# comparison, and a way out should forking ever misbehave somewhere).
START_ENV = "MCAP_STAGE_START"
START_METHODS = ("fork", "spawn")  # fork: from the zygote (the default on the CPU)


def start_method() -> str:
    """``$MCAP_STAGE_START`` (default fork); McapError naming a bad value."""
    asked = os.environ.get(START_ENV, "").strip() or "fork"
    if asked not in START_METHODS:
        raise McapError(f"{START_ENV}={asked!r:.40} is not one of {', '.join(START_METHODS)}")
    return asked


# numpy's OpenBLAS would start a thread pool at import; the zygote must stay single-threaded
# to fork safely (torch does not use numpy's BLAS).
from mcap.runner.early import ZYGOTE_ENV  # noqa: E402  (one definition: the early zygote's)

# After one stage reports oom/failed, how long the others may still take to answer before
# the pool is killed (they are usually blocked waiting for that stage).
GRACE_SECONDS = 2.0
_REPO = Path(__file__).resolve().parent.parent.parent


class WorkerPool:
    """``world`` worker processes serving runs of one model under one setup."""

    def __init__(self, spec: str, setup: Setup, world: int, timeout: float, group: bool,
                 startup_timeout: float, alone: bool = False):
        self.spec, self.setup, self.world, self.timeout, self.group = \
            spec, setup, world, timeout, group
        # Stages run alone (mcap.runner.alone): ``world`` is the number of slots, each
        # worker takes one stage job at a time, and no process group joins them.
        self.alone = alone
        self.startup_timeout = startup_timeout
        self.workers: list[Spawned] = []
        self.info: Optional[ModelInfo] = None
        self.machine: Optional[Machine] = None  # rank 0's fingerprint (Hello)
        self._ready = False
        self._tmp: Optional[str] = None
        self._run_id = 0
        self._starts = 0
        self._zygote: Optional[Zygote] = None
        self._zygote_dir: Optional[str] = None
        self._spawn_only = False  # the zygote refused to fork here: spawn from now on
        # Stage jobs done and failed, and the dispatch in progress (tasks(): issue 42)
        self._tasks_done = self._tasks_failed = 0
        self._dispatch_now = None

    # ---- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        """Start the workers; returns at once (they import torch and build the model)."""
        self._starts += 1
        self._tmp = tempfile.mkdtemp(prefix="mcap-pool-")
        self._init_file = os.path.join(self._tmp, "rendezvous") if self.group else None
        env = dict(os.environ)
        # The repo first, then the caller's own folder: a user model module there is found as
        # ``python -m mcap`` finds it (workers run with cwd=repo).
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_REPO), os.getcwd(), env.get("PYTHONPATH", "")) if p)
        # Exactly the setup's threads, whatever the caller's environment says: a CPU
        # stage's peak depends on them (Setup.threads, issue 11); and malloc's thresholds
        # fixed, so its times do not depend on what the process ran before
        # (heap.MALLOC_ENV).
        env.update(process_env(self.setup.threads))
        self._env = env
        for rank in range(self.world):
            self.workers.append(self._spawn(rank))
        self._ready = False

    def _spawn(self, rank: int) -> Spawned:
        """Worker ``rank``: forked by the zygote or started as its own process, sent its
        Init; it answers with a Hello once it has built the model."""
        zygote = self._zygote_for(self._env)
        parent_end, child_end = Pipe(duplex=True)
        self._spawned = getattr(self, "_spawned", 0) + 1
        log = Path(self._tmp) / f"worker{rank}-{self._spawned}.log"
        if zygote is not None:
            request = zygote.fork(child_end, str(log))
            worker: Spawned = Forked(zygote, request, parent_end, log, self.startup_timeout)
        else:
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "mcap.runner.worker", str(child_end.fileno())],
                    pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, env=self._env, cwd=str(_REPO),
                    start_new_session=True)  # Ctrl-C reaches the runner, which ends them
            worker = Spawned(proc, parent_end, log)
        child_end.close()
        # The group's own timeout covers the rendezvous (a peer may still be compiling
        # memtrack) and any receive; hung runs are ended by the pool before that.
        parent_end.send(Init(self.spec, self.setup, rank, self.world, self._init_file,
                             pg_timeout=max(self.timeout, self.startup_timeout),
                             alone=self.alone))
        return worker

    def _replace(self, slot: int) -> None:
        """A fresh process in ``slot`` (stages run alone): one that ran out of memory or
        failed is not in a clean state (what the failed run held may stay referenced), as
        a restarted pool is not after a concurrent run's failure. Its Hello is awaited
        by the caller."""
        old = self.workers[slot]
        if isinstance(old, Forked):
            z = old.zygote
            if old.pid and z is not None and not z.dead:
                z.kill([old.pid])
        old.end()
        self.workers[slot] = self._spawn(slot)

    def _zygote_for(self, env: dict) -> Optional[Zygote]:
        """The pool's zygote (started once, kept across restarts), or None to spawn."""
        if (self.setup.device != "cpu" or not hasattr(os, "fork")
                or start_method() == "spawn" or self._spawn_only):
            return None
        if self._zygote is not None and (self._zygote.dead or self._zygote.refused):
            self._spawn_only = self._spawn_only or bool(self._zygote.refused)
            self._zygote.close()
            self._zygote = None
            if self._spawn_only:
                return None
        if self._zygote is None:
            from mcap.runner import early
            adopted = early.adopt({**env, **ZYGOTE_ENV})  # started before the CLI parsed
            if adopted is not None:
                self._zygote, folder = adopted
                if self._zygote_dir:
                    shutil.rmtree(self._zygote_dir, ignore_errors=True)
                self._zygote_dir = folder
            else:
                self._zygote_dir = self._zygote_dir or tempfile.mkdtemp(prefix="mcap-zygote-")
                self._zygote = Zygote({**env, **ZYGOTE_ENV}, str(_REPO),
                                      os.path.join(self._zygote_dir, "zygote.log"))
            self._zygote.prepare(self.spec, self.setup)
        return self._zygote

    def wait_ready(self, deadline: float) -> Optional[str]:
        """Wait for every Hello. Returns None when ready, else why not (a crash or a hang).
        Raises McapError when a worker rejected the input (an unknown model, ...)."""
        if self._ready:
            return None
        pending = {w.conn: rank for rank, w in enumerate(self.workers)}
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                return (f"stage processes {sorted(pending.values())} were not ready within "
                        f"{self.startup_timeout:g} s")
            zygote = self._zygote if isinstance(self.workers[0], Forked) else None
            watched = list(pending) + ([zygote.conn] if zygote and not zygote.dead else [])
            for conn in wait(watched, timeout=left):
                if zygote is not None and conn is zygote.conn:
                    zygote.pump()
                    if zygote.refused:  # not safe to fork here: start plain processes
                        self.kill()
                        self.start()
                        return self.wait_ready(deadline)
                    continue
                rank = pending.pop(conn)
                try:
                    hello: Hello = conn.recv()
                except (EOFError, OSError):
                    return f"stage process {rank} {self.workers[rank].describe_exit()}"
                if hello.error and hello.is_bad_input:
                    raise McapError(hello.error)
                if hello.error:
                    return f"stage process {rank} could not start: {hello.error}"
                if rank == 0:
                    self.info, self.machine = hello.info, hello.machine
        self._ready = True
        return None

    def close(self) -> None:
        """End every worker (politely, then by pid), the zygote, and the pool's files."""
        for w in self.workers:
            try:
                w.conn.send(Stop())
            except (OSError, ValueError):
                pass
        end = time.monotonic() + 3
        for w in self.workers:
            w.exit_code(max(0.1, end - time.monotonic()))
        self.kill()
        if self._zygote is not None:
            self._zygote.close()  # it reaps its children before it exits
            self._zygote = None
        if self._zygote_dir:
            shutil.rmtree(self._zygote_dir, ignore_errors=True)
            self._zygote_dir = None

    def kill(self) -> None:
        """Kill every worker and reap it; the zygote stays for the next start."""
        forked = [w for w in self.workers if isinstance(w, Forked)]
        z = self._zygote
        if forked and z is not None and not z.dead:
            z.pump()
            if all(w.request in z.forked for w in forked):
                z.kill([w.pid for w in forked if w.pid])
            else:  # still importing torch or forking: end it (its children die with it)
                z.close(quit_first=False)
        for w in self.workers:
            w.end()
        self.workers = []
        self._ready = False
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def restart(self) -> None:
        self.kill()
        self.start()

    def orders(self, schedule: str, stages: int, virtual: int, chunks: int):
        """A schedule's action list from the pool's zygote, which has torch's pipelining
        imported (``Zygote.orders``); None where there is none or it could not answer."""
        z = self._zygote
        if z is None or z.dead or z.refused:
            return None
        return z.orders(schedule, stages, virtual, chunks)

    @property
    def pids(self) -> list[int]:
        return [w.pid for w in self.workers]

    def tasks(self):
        """Stage jobs run alone done, running and queued on this machine (the progress
        line's counts by node, ``mcap.core.tasks.TaskTally``; issue 42)."""
        import socket

        from mcap.core.tasks import TaskTally, counts
        node = socket.gethostname()
        now = self._dispatch_now
        return TaskTally(counts({node: self._tasks_done}),
                         counts({node: len(now.busy) if now else 0}),
                         len(now.todo) if now else 0, counts({node: self._tasks_failed}))

    # ---- one run ----------------------------------------------------------------------
    def run(self, balance: tuple[int, ...], press=None
            ) -> tuple[list[StageResult], Optional[str]]:
        """Send one Job to all workers and gather their results within the timeout; for
        a pool of stages run alone, one Job per stage over the free slots
        (:meth:`run_stages`): per ``Setup.stages`` processes a run has, i.e. per device of
        a hybrid plan (whose ``balance`` is its stage configs).

        Returns (stage results in stage order, or fewer; a failure message or None). On any
        failure the pool has been restarted before this returns.
        """
        if self.alone:
            done, why = self.run_stages([(tuple(balance), i)
                                         for i in range(self.setup.stages)], press)
            return sorted((r for _, r in done), key=lambda r: r.stage), why
        why = self.wait_ready(time.monotonic() + self.startup_timeout)
        if why:
            self.restart()
            return [], why
        self._run_id += 1
        if press is not None:  # d2d channels live in the pool's private folder
            from mcap.runner.protocol import PressJob
            press = PressJob(press, self._tmp, self._run_id)
        deadline = time.monotonic() + self.timeout
        job = Job(self._run_id, tuple(balance), press)
        pending = {w.conn: rank for rank, w in enumerate(self.workers)}
        results: list[StageResult] = []
        problems: list[str] = []
        for conn, rank in list(pending.items()):
            try:
                conn.send(job)
            except OSError:
                pending.pop(conn)
                problems.append(f"stage process {rank} {self.workers[rank].describe_exit()}")
        if problems:
            deadline = min(deadline, time.monotonic() + GRACE_SECONDS)
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            for conn in wait(list(pending), timeout=left):
                rank = pending.pop(conn)
                try:
                    reply: Reply = conn.recv()
                except (EOFError, OSError):
                    problems.append(f"stage process {rank} {self.workers[rank].describe_exit()}")
                    deadline = min(deadline, time.monotonic() + GRACE_SECONDS)
                    continue
                results.extend(reply.results)
                if any(r.status != "ok" for r in reply.results):
                    deadline = min(deadline, time.monotonic() + GRACE_SECONDS)
        if pending and not problems and all(r.status == "ok" for r in results):
            problems.append(f"run timed out after {self.timeout:g} s: stage processes "
                            f"{sorted(pending.values())} did not finish")
        clean = not pending and not problems and all(r.status == "ok" for r in results)
        if not clean:
            self.restart()
        results.sort(key=lambda r: r.stage)
        return results, ("; ".join(problems) or None)


    def run_stages(self, jobs, press=None, on_result=None
                   ) -> tuple[list, Optional[str]]:
        """Stages run alone: each ``(balance, stage)`` of ``jobs`` to the next free slot,
        each within the timeout; ``on_result(job, result)`` as each one ends. A stage's
        oom or failure is its result (nothing waits on it). A slot whose process dies
        (killed, host memory) is restarted and its stage tried once more; a second death
        or a hung stage ends the call. Returns ([(job, StageResult)] in the order they
        ended, a failure message or None); after a failure the pool has been restarted."""
        if not self.alone:
            raise McapError("run_stages needs a pool of stages run alone")
        todo = [(tuple(b), int(i)) for b, i in jobs]
        done: list = []
        retried: set = set()
        while todo:
            why = self.wait_ready(time.monotonic() + self.startup_timeout)
            if why:
                self.restart()
                return done, why
            self._run_id += 1
            job_press = press
            if press is not None:
                from mcap.runner.protocol import PressJob
                job_press = PressJob(press, self._tmp, self._run_id)
            got, lost, problems = self._dispatch(todo, job_press, on_result)
            done += got
            finished = {job for job, _ in got}
            todo = [j for j in todo if j not in finished]
            if not problems:
                break
            self.restart()
            if not lost or any(j in retried for j in lost):
                return done, "; ".join(problems)
            retried.update(lost)
        return done, None

    def _dispatch(self, todo, press, on_result):
        """One pass of :meth:`run_stages` over ready slots: (done, jobs whose process
        died, problems); :class:`mcap.runner.slots.SlotDispatch`."""
        return SlotDispatch(self, todo, press, on_result).run()

    def _hello(self, conn, slot: int) -> Optional[str]:
        """Read a replaced slot's Hello; None when it is ready, else why not."""
        try:
            hello: Hello = conn.recv()
        except (EOFError, OSError):
            return f"stage process {slot} {self.workers[slot].describe_exit()}"
        return hello.error and f"stage process {slot} could not start: {hello.error}"
