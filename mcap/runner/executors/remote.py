"""The driver's side of a cluster executor (issue 42): the runner's pool interface
(``mcap.runner.pool.WorkerPool``: ``wait_ready``, ``info``, ``machine``, ``run``,
``run_stages``, ``close``) over a :class:`Backend` that runs each stage-alone measurement
as a task in a fresh process (``mcap.runner.fresh``) somewhere on a cluster.

What the pool guarantees, whatever the backend:

- **Results come back; the driver records them.** ``run_stages`` calls ``on_result`` the
  moment a task's result arrives (the workflow stores it at once), once per job: a task
  sent again, cancelled or timed out is delivered once at most.
- **Faults.** A task whose process or node was lost (killed, out of host memory, the node
  gone) is sent again, up to ``--retries`` times, and lands wherever the scheduler has
  room; then it is a ``failed`` result naming its node and error. A task running longer
  than the run timeout is cancelled and failed. Bad input (an unknown model) ends the call
  with McapError.
- **Machines.** The probe task's fingerprint is the pool's ``machine``; every result
  carries its own. Results of another fingerprint are delivered (stored under their own
  machine) and the call then raises :class:`MixedMachines` naming every fingerprint: a
  sweep is never mixed silently.
- **Never waits silently.** Tasks queued ``--queue-timeout`` minutes with none of them
  starting end the call with McapError (exit 2) naming what they ask and why they wait.
- **Progress** by node: :meth:`RemotePool.tasks` (``mcap.core.tasks.TaskTally``).
"""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

from mcap.core.errors import McapError
from mcap.core.machine import Machine
from mcap.core.tasks import TaskTally, counts
from mcap.core.types import ModelInfo, Setup
from mcap.runner.protocol import Job, StageResult

PROBE = "probe"  # the kind of the task that reports the model and the machine
MEASURE = "measure"


@dataclass(frozen=True)
class Task:
    """One task for the backend: ``key`` names it in its events; ``job`` is None for the
    probe."""
    key: str
    kind: str
    job: Optional[Job]


@dataclass(frozen=True)
class Started:
    key: str
    node: str


@dataclass(frozen=True)
class Finished:
    key: str
    outcome: object  # mcap.runner.fresh.Outcome


@dataclass(frozen=True)
class Lost:
    """The task's process or node went away (or the scheduler gave up on it)."""
    key: str
    node: Optional[str]
    error: str


class Backend:
    """What a cluster executor provides (``ray``: a bridge process driving Ray; ``slurm``:
    submitit's job arrays). Events come from :meth:`poll`."""
    name = ""

    def connect(self, deadline: float) -> None:
        """Reach the cluster and refuse what it cannot run (McapError, exit 2)."""

    def submit(self, tasks: list[Task]) -> None:
        raise NotImplementedError

    def poll(self, timeout: float) -> list:
        raise NotImplementedError

    def cancel(self, keys: list[str]) -> None:
        raise NotImplementedError

    def forget(self, key: str) -> None:
        """The driver has stored the task's result: its files may go."""

    def asks(self) -> str:
        """What each task asks for (for messages): ``1 CPU``, ``1 GPU``."""
        return ""

    def waiting(self, keys: list[str]) -> str:
        """Why these queued tasks wait, as the scheduler says ("" when it does not)."""
        return ""

    def resources(self) -> str:
        """What the cluster offers (for messages)."""
        return ""

    def close(self) -> None:
        pass


class MixedMachines(McapError):
    """Results of one call came from machines of different fingerprints."""


@dataclass
class _Flight:
    task: Task
    job: Optional[tuple]  # (balance, stage) as the caller gave it
    attempts: int = 1
    node: Optional[str] = None
    started: Optional[float] = None


@dataclass
class _Board:
    done: dict = field(default_factory=dict)
    failed: dict = field(default_factory=dict)
    retried: int = 0


class RemotePool:
    """A runner's pool whose stage jobs are tasks of a cluster (module docstring)."""

    alone = True

    def __init__(self, executor, settings, spec: str, setup: Setup, *, timeout: float,
                 startup_timeout: float, backend: Callable[[], Backend]):
        self.executor, self.settings = executor, settings
        self.spec, self.setup = spec, setup
        self.timeout, self.startup_timeout = timeout, startup_timeout
        self.retries = int(settings.get("retries", 2))
        self.queue_seconds = float(settings.get("queue_timeout", 10.0)) * 60.0
        self._make_backend = backend
        self.backend: Optional[Backend] = None
        self.info: Optional[ModelInfo] = None
        self.machine: Optional[Machine] = None
        self.probe_node: Optional[str] = None
        self._flights: dict[str, _Flight] = {}
        self._board = _Board()
        self._run_id = 0
        self._probes = 0

    # ---- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        """Nothing starts before it is needed: :meth:`wait_ready` reaches the cluster."""

    def wait_ready(self, deadline: float) -> Optional[str]:
        """Reach the cluster and run the probe task: the model's layers and the machine the
        tasks measure on. None when ready, else why not; McapError for bad input."""
        if self.info is not None:
            return None
        if self.backend is None:
            self.backend = self._make_backend()
            self.backend.connect(deadline)
            import sys
            print(f"mcap: executor {self.executor.name}: {self.backend.resources()}",
                  file=sys.stderr, flush=True)
        self._probes += 1  # a probe tried again is a task of its own
        done, why = self._run([Task(f"probe{self._probes}", PROBE, None)], [None], None,
                              deadline)
        if not done:
            return why or "the probe task did not finish"
        outcome = done[0][1]
        self.info, self.probe_node = outcome.info, outcome.node
        self.machine = _metered(outcome.machine, self.setup)
        return None

    def restart(self) -> None:
        """Each task has a process of its own: nothing to restart."""

    def kill(self) -> None:
        self.close()

    def close(self) -> None:
        if self.backend is not None:
            try:
                self.backend.cancel([k for k in self._flights])
            finally:
                self.backend.close()
                self.backend = None
        self._flights.clear()

    @property
    def pids(self) -> list[int]:
        return []  # the tasks' processes live on the cluster's nodes

    def tasks(self) -> TaskTally:
        """Tasks done, running and failed by node, and queued (``mcap.core.tasks``)."""
        running: dict = {}
        queued = 0
        for f in self._flights.values():
            if f.task.kind == PROBE:
                continue
            if f.started is None:
                queued += 1
            else:
                running[f.node] = running.get(f.node, 0) + 1
        b = self._board
        return TaskTally(counts(b.done), counts(running), queued, counts(b.failed), b.retried)

    # ---- runs -------------------------------------------------------------------------
    def run(self, balance: tuple[int, ...], press=None):
        """Every stage (or device) of ``balance`` as a task: (results in stage order, why)."""
        done, why = self.run_stages([(tuple(balance), i) for i in range(self.setup.stages)],
                                    press)
        return sorted((r for _, r in done), key=lambda r: r.stage), why

    def run_stages(self, jobs, press=None, on_result=None):
        """Each ``(balance, stage)`` of ``jobs`` as a task; ``on_result(job, StageResult)``
        as each arrives. Returns ([(job, StageResult)] in the order they ended, why or
        None). Raises McapError when tasks cannot be scheduled, MixedMachines when results
        came from machines of different fingerprints (after delivering them all)."""
        why = self.wait_ready(time.monotonic() + self.startup_timeout)
        if why:
            return [], why
        from mcap.runner.protocol import PressJob
        self._run_id += 1
        job_press = None if press is None else PressJob(press, None, self._run_id)
        given = [(tuple(b), int(i)) for b, i in jobs]  # a plan's "balance" is its stages
        tasks = [Task(self._key(k), MEASURE, Job(self._run_id, b, job_press, stage=i))
                 for k, (b, i) in enumerate(given)]
        done, why = self._run(tasks, given, on_result, None)
        self._check_machines(done)
        return done, why

    def _key(self, index: int) -> str:
        return f"{self._run_id}:{index}"

    def _run(self, tasks: list[Task], jobs: list, on_result, deadline: Optional[float]):
        """Send ``tasks`` and follow them to the end (module docstring)."""
        backend = self.backend
        for task, job in zip(tasks, jobs):
            self._flights[task.key] = _Flight(task, job)
        backend.submit(tasks)
        done: list = []
        progress = time.monotonic()
        try:
            while any(t.key in self._flights for t in tasks):
                now = time.monotonic()
                if deadline is not None and now > deadline:
                    return done, (f"the probe task did not finish within "
                                  f"{self.startup_timeout:g} s")
                for event in backend.poll(0.5):
                    if self._event(event, done, on_result):
                        progress = time.monotonic()
                self._late(done, on_result)
                self._queue_watch(progress)
        except BaseException:
            self._cancel([t.key for t in tasks])
            raise
        return done, None

    def _event(self, event, done: list, on_result) -> bool:
        """Apply one backend event; True when something started or ended."""
        flight = self._flights.get(event.key)
        if flight is None:
            return False  # a task already delivered, cancelled or timed out
        if isinstance(event, Started):
            flight.node, flight.started = event.node, time.monotonic()
            return True
        if isinstance(event, Finished):
            outcome = event.outcome
            if outcome.bad_input:
                self._cancel(list(self._flights))
                raise McapError(outcome.bad_input)
            flight.node = outcome.node
            result = outcome.result
            if result is None and flight.task.kind != PROBE:
                result = StageResult(flight.job[1], "failed", error=f"on node {outcome.node}: "
                                     "the task returned no result")
            if result is not None:
                result = dataclasses.replace(result, node=outcome.node,
                                             machine=_metered(outcome.machine, self.setup))
            self._deliver(flight, outcome if flight.task.kind == PROBE else result, done,
                          on_result)
            return True
        # Lost: the process or node went away; send it again while tries are left
        node = event.node or flight.node
        if flight.attempts <= self.retries:
            flight.attempts += 1
            flight.node, flight.started = None, None
            self._board.retried += 1
            self.backend.submit([flight.task])
            return True
        stage = flight.job[1] if flight.job else 0
        where = f"on node {node}" if node else "on no node"
        error = (f"{where}: {event.error} (tried {flight.attempts} time"
                 f"{'s' if flight.attempts != 1 else ''})")
        if flight.task.kind == PROBE:
            self._flights.pop(flight.task.key, None)
            raise McapError(f"executor {self.executor.name}: the probe task failed {error}")
        self._deliver(flight, StageResult(stage, "failed", error=error, node=node), done,
                      on_result)
        return True

    def _deliver(self, flight: _Flight, result, done: list, on_result) -> None:
        self._flights.pop(flight.task.key, None)
        node = flight.node or "?"
        board = self._board
        if flight.task.kind != PROBE:  # the counts are the measurements
            if isinstance(result, StageResult) and result.status == "failed":
                board.failed[node] = board.failed.get(node, 0) + 1
            board.done[node] = board.done.get(node, 0) + 1
        done.append((flight.job, result))
        if on_result is not None and flight.task.kind != PROBE:
            on_result(flight.job, result)  # recorded in the store now
        if self.backend is not None:
            self.backend.forget(flight.task.key)

    def _late(self, done: list, on_result) -> None:
        """Tasks running past the run timeout: cancelled, failed."""
        now = time.monotonic()
        late = [f for f in self._flights.values()
                if f.task.kind != PROBE and f.started is not None
                and now - f.started > self.timeout]
        if not late:
            return
        self.backend.cancel([f.task.key for f in late])
        for f in late:
            self._deliver(f, StageResult(f.job[1], "failed", node=f.node, error=(
                f"on node {f.node}: timed out after {self.timeout:g} s (stage {f.job[1]} of "
                f"{list(f.job[0])})")), done, on_result)

    def _queue_watch(self, progress: float) -> None:
        """Queued tasks and nothing started or ended for ``--queue-timeout``: exit 2."""
        queued = [k for k, f in self._flights.items() if f.started is None]
        if not queued or time.monotonic() - progress < self.queue_seconds:
            return
        why = self.backend.waiting(queued)
        asks = self.backend.asks()
        offers = self.backend.resources()
        self._cancel(list(self._flights))
        raise McapError(
            f"executor {self.executor.name}: {len(queued)} task(s) waited "
            f"{self.queue_seconds / 60:g} min in the queue and none started"
            + (f" ({why})" if why else "") + (f"; each asks {asks}" if asks else "")
            + (f"; the cluster has {offers}" if offers else "")
            + "; finished tasks are kept in the store, run the command again when the "
              "cluster has room (--queue-timeout MIN waits longer)")

    def _cancel(self, keys: list[str]) -> None:
        if self.backend is not None and keys:
            try:
                self.backend.cancel(keys)
            except Exception:  # noqa: BLE001 (best effort on the way out)
                pass
        for k in keys:
            self._flights.pop(k, None)

    def _check_machines(self, done: list) -> None:
        """MixedMachines when a result's fingerprint is not the probe's."""
        seen: dict = {}
        for _, result in done:
            m = result.machine
            if m is None:
                continue
            entry = seen.setdefault(m.key(), [m, 0, set()])
            entry[1] += 1
            entry[2].add(result.node or "?")
        if self.machine is None or all(k == self.machine.key() for k in seen):
            return
        parts = [f"{n} on {m.describe()} (key {k}; node{'s' if len(nodes) > 1 else ''} "
                 f"{', '.join(sorted(nodes))})" for k, (m, n, nodes) in seen.items()]
        raise MixedMachines(
            f"executor {self.executor.name}: the tasks ran on machines of different "
            f"fingerprints, whose peaks are never mixed in one result: " + "; ".join(parts)
            + f"; the probe ran on {self.machine.describe()} (key {self.machine.key()}). "
              "Each stage is stored under its own machine; send the tasks to one kind of "
              "node and run the command again")


def _metered(machine: Optional[Machine], setup: Setup) -> Optional[Machine]:
    """A task's fingerprint as the runner states it (stages alone: ``Machine.meter``)."""
    from mcap.runner.machine import with_meter
    return with_meter(machine, setup, "stage")
