"""Stages run alone over a pool's slots (:meth:`mcap.runner.pool.WorkerPool.run_stages`):
one pass that sends each stage job to the next free slot, gathers its reply within the
timeout, replaces a slot whose stage ran out of memory or failed and waits for the fresh
process's Hello, and stops at the first problem (a dead process, a hang)."""
from __future__ import annotations

import time
from multiprocessing.connection import wait
from typing import Callable, Optional

from mcap.runner.protocol import Job, Reply


class SlotDispatch:
    """One pass of ``pool.run_stages`` over its ready slots: :meth:`run` returns (done:
    [(job, StageResult)] in the order they ended, jobs whose process died, problems)."""

    def __init__(self, pool, todo, press, on_result: Optional[Callable]):
        self.pool, self.press, self.on_result = pool, press, on_result
        self.todo = list(todo)
        self.free = list(range(len(pool.workers)))
        self.busy: dict = {}  # conn -> (slot, job, deadline)
        self.starting: dict = {}  # conn -> (slot, deadline): a replaced slot's fresh process
        self.done: list = []
        self.lost: list = []
        self.problems: list[str] = []

    def run(self):
        self.pool._dispatch_now = self  # what WorkerPool.tasks counts as running and queued
        try:
            return self._run()
        finally:
            self.pool._dispatch_now = None

    def _run(self):
        while ((self.todo or self.starting) and not self.problems) or self.busy:
            if not self.busy and not self.free and self.starting:
                self._wait_starting()
                continue
            self._send()
            if not self.busy:
                if self.starting and self.todo and not self.problems:
                    continue
                break
            left = min(d for _, _, d in self.busy.values()) - time.monotonic()
            if left <= 0:
                late = [f"stage {j[1]} of {list(j[0])}" for _, j, d in self.busy.values()
                        if d <= time.monotonic()]
                self.problems.append(f"run timed out after {self.pool.timeout:g} s: "
                                     f"{', '.join(late)} did not finish")
                break
            for conn in wait(list(self.busy) + list(self.starting), timeout=left):
                if conn in self.starting:
                    self._started(conn)
                else:
                    self._received(conn)
        self._settle_starting()
        return self.done, self.lost, self.problems

    def _wait_starting(self) -> None:
        """Every slot is being replaced: wait for the first fresh process's Hello."""
        left = min(d for _, d in self.starting.values()) - time.monotonic()
        for conn in wait(list(self.starting), timeout=max(0.0, left)):
            self._started(conn)
        if left <= 0 and self.starting:
            self.problems.append(
                f"stage processes {sorted(s for s, _ in self.starting.values())}"
                f" were not ready again within {self.pool.startup_timeout:g} s")

    def _send(self) -> None:
        """The next jobs to the free slots."""
        pool = self.pool
        while self.todo and self.free and not self.problems:
            slot, job = self.free.pop(0), self.todo.pop(0)
            conn = pool.workers[slot].conn
            try:
                conn.send(Job(pool._run_id, job[0], self.press, stage=job[1]))
            except OSError:
                self.problems.append(f"stage process {slot} "
                                     f"{pool.workers[slot].describe_exit()}")
                self.lost.append(job)
                break
            self.busy[conn] = (slot, job, time.monotonic() + pool.timeout)

    def _started(self, conn) -> None:
        """A replaced slot's Hello: free again, or a problem."""
        slot, _ = self.starting.pop(conn)
        why = self.pool._hello(conn, slot)
        if why:
            self.problems.append(why)
        else:
            self.free.append(slot)

    def _received(self, conn) -> None:
        """A busy slot's reply: its results, and the slot freed or (after an oom or a
        failure, which leaves the process unclean) replaced."""
        pool = self.pool
        slot, job, _ = self.busy.pop(conn)
        try:
            reply: Reply = conn.recv()
        except (EOFError, OSError):
            self.problems.append(f"stage process {slot} (running stage {job[1]} of "
                                 f"{list(job[0])}) {pool.workers[slot].describe_exit()}")
            self.lost.append(job)
            return
        for result in reply.results:
            self.done.append((job, result))
            pool._tasks_done += 1
            pool._tasks_failed += result.status == "failed"
            if self.on_result is not None:
                self.on_result(job, result)
        if any(r.status != "ok" for r in reply.results):
            pool._replace(slot)
            self.starting[pool.workers[slot].conn] = (
                slot, time.monotonic() + pool.startup_timeout)
        else:
            self.free.append(slot)

    def _settle_starting(self) -> None:
        """Slots still being replaced are ready before the next call (or a problem)."""
        pool = self.pool
        for conn, (slot, deadline) in list(self.starting.items()):
            if wait([conn], timeout=max(0.0, deadline - time.monotonic())):
                why = pool._hello(conn, slot)
            else:
                why = (f"stage process {slot} was not ready again within "
                       f"{pool.startup_timeout:g} s")
            if why:
                self.problems.append(why)
