"""What every long command shares (profile, sweep, scale, measure): a ``Measurer`` that takes
a run from the store or measures and records it at once, the ``Tally`` of what a command
did, SIGTERM as ``Cancelled`` (the dashboard's cancel button), a dashboard job's status,
and the model's layers built on the meta device."""
from __future__ import annotations

import contextlib
import dataclasses
import signal
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.types import ModelInfo, Run, Setup
from mcap.store import Store
from mcap.workflow.progress import ProgressBar

DEFAULT_TIMEOUT = 300.0  # seconds per run (issue 4, Runner: a timeout applies per run)


class Cancelled(BaseException):
    """SIGTERM arrived (the dashboard's cancel button): stop measuring, keep what is stored.

    A BaseException so no ``except Exception`` on the way swallows it."""


@dataclass(frozen=True)
class Tally:
    """What a command did: runs in its result, how many were measured now or reused.

    ``measured`` and ``reused`` count every run the command made, the dp/tp runs of
    ``profile --parallel`` (``parallel_runs``, mcap.workflow.capture.parallel) too; ``runs`` are the
    pipeline-only runs of the result and ``parallel_measured`` / ``parallel_reused`` say
    how many of the counts were dp/tp runs."""
    measured: int
    reused: int
    seconds: float
    runs: tuple[Run, ...] = ()
    fallback: tuple[tuple[int, ...], ...] = ()  # balances added by the oom fallback
    composed: int = 0  # runs composed from other runs' stages (mcap.core.profiling.cover), not measured
    cover: int = 0     # covering partitionings a reusing sweep chose to measure
    parallel_measured: int = 0  # of ``measured``, dp/tp runs (--parallel)
    parallel_reused: int = 0    # of ``reused``, dp/tp runs
    parallel_runs: tuple[Run, ...] = ()  # the dp/tp runs, per-stage peaks as stored
    alone: bool = False  # a sweep of stages run alone: ``measured`` and ``cover`` count stages

    def with_parallel(self, made) -> "Tally":
        """This tally with the dp/tp runs of ``made`` (a hybrid.ParallelTally) added."""
        return dataclasses.replace(
            self, measured=self.measured + made.measured, reused=self.reused + made.reused,
            parallel_measured=self.parallel_measured + made.measured,
            parallel_reused=self.parallel_reused + made.reused,
            parallel_runs=self.parallel_runs + tuple(made.runs))

    @staticmethod
    def combined(tallies: Sequence["Tally"], seconds: float) -> "Tally":
        """One tally for a command made of several (CAPTURE's passes, mcap.workflow.capture.batches)."""
        return Tally(sum(t.measured for t in tallies), sum(t.reused for t in tallies), seconds,
                     tuple(r for t in tallies for r in t.runs),
                     tuple(b for t in tallies for b in t.fallback),
                     composed=sum(t.composed for t in tallies),
                     cover=sum(t.cover for t in tallies),
                     parallel_measured=sum(t.parallel_measured for t in tallies),
                     parallel_reused=sum(t.parallel_reused for t in tallies),
                     parallel_runs=tuple(r for t in tallies for r in t.parallel_runs))


@dataclass
class Measurer:
    """Gets a run for a balance: from the store if finished before, else measured now and
    recorded at once. Opens the runner (stage processes) on first need only."""
    spec: str
    info: ModelInfo
    setup: Setup
    store: Store
    kind: str  # the store's run kind: "profile", "sweep" or "measure"
    bar: ProgressBar
    job: Optional[int] = None
    timeout: float = DEFAULT_TIMEOUT
    # Stage keys known from stored runs (mcap.core.profiling.cover.Knowledge): a balance whose every
    # stage is known is composed instead of measured. None: measure everything.
    knowledge: object = None
    measured: int = 0
    reused: int = 0
    composed: int = 0
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)
    _runner: object = None
    _local: object = None  # this machine as the parent sees it, before any stage process

    def __post_init__(self):
        self.study = self.store.study(self.info, self.setup)

    @property
    def machine(self):
        """Where the runs are measured (mcap.core.machine): the stage processes' own report
        once they run; before that the parent's view of this machine with the setup's
        threads, so stored runs are looked up without starting any process."""
        if self._runner is not None:
            return self._runner.machine
        if remote_executor():  # a cluster's nodes measure: their fingerprint (the probe's)
            return self.runner.machine
        if self._local is None:
            from mcap.runner.machine import collect
            self._local = collect(self.setup)
        return self._local

    def get(self, balance: tuple[int, ...]) -> Run:
        # Only a run of this very machine is reused: another machine's peaks may differ.
        found = self.store.find_run(self.study, balance, machine=self.machine)
        if found is not None:
            self.reused += 1
            self.bar.advance(balance, measured=False, note=_note(found) + " (stored)")
            self._report(balance)
            return found
        if self.knowledge is not None:
            # Not recorded here: a composed run is no measurement to resume from;
            # save_profile / save_sweep store it with the result.
            made = self.knowledge.compose(balance)
            if made is not None:
                self.composed += 1
                self.bar.advance(balance, measured=False, note=_note(made) + " (composed)")
                self._report(balance)
                return made
        self.bar.start(balance)
        self._report(balance, current=True)
        run = self._measure(balance)
        self.store.record_run(self.study, run, kind=self.kind, job=self.job,
                              machine=self.machine)
        if self.knowledge is not None:
            self.knowledge.add(run)
        self.measured += 1
        self.bar.advance(balance, measured=True, note=self._with_tasks(_note(run)))
        self._report(balance)
        return run

    def _measure(self, balance: tuple[int, ...]) -> Run:
        return self.runner.measure(balance)

    def get_many(self, balances) -> list[Run]:
        """``get`` of each of ``balances``, in order. Where the executor runs more stages at
        once than a partitioning has (a cluster, more GPUs than stages; issue 42), the
        stages of every balance still to measure (on a cluster, of one too) go out together,
        each stored as it ends, a balance's run the moment its last stage is in."""
        balances = [tuple(int(n) for n in b) for b in balances]
        pending = [b for b in dict.fromkeys(balances) if not self._known(b)]
        many = len(pending) > 1 or (len(pending) == 1 and remote_executor())
        made = self._measure_many(pending) if many and self._fans_out() else {}
        return [made[b] if b in made else self.get(b) for b in balances]

    def _known(self, balance) -> bool:
        """Stored or composable already (``get`` would not measure it)."""
        if self.knowledge is not None and self.knowledge.compose(balance) is not None:
            return True
        return self.store.find_run(self.study, balance, machine=self.machine) is not None

    def _fans_out(self) -> bool:
        runner = self.runner
        return bool(runner.alone and (runner.executor.remote or
                                      runner.slots > self.setup.stages))

    def _measure_many(self, pending: list) -> dict:
        """Every stage of ``pending`` to the executor at once (``get_many``)."""
        from mcap.core.profiling.cover import run_from_stages
        made: dict = {}
        # A driver stopped half-way stored some of these balances' stages: they are not
        # sent again (a failed one is).
        want = set(pending)
        got: dict = {}
        for stage_run in self.store.stage_runs(self.study, self.machine):
            b = tuple(stage_run.balance)
            if b in want and stage_run.status != "failed":
                got.setdefault(b, {})[stage_run.stage] = stage_run

        def complete(b) -> None:  # the balance's run, recorded now
            run = self.estimate(run_from_stages(b, [got[b][i] for i in range(len(b))]))
            self.store.record_run(self.study, run, kind=self.kind, job=self.job,
                                  machine=self.machine)
            if self.knowledge is not None:
                self.knowledge.add(run)
            made[b] = run
            self.measured += 1
            self.bar.advance(b, measured=True, note=self._with_tasks(_note(run)))
            self._report(b)

        def done(stage_run):
            self._record_stage(stage_run)
            b = tuple(stage_run.balance)
            got.setdefault(b, {})[stage_run.stage] = stage_run
            if len(got[b]) == len(b):
                complete(b)
        for b in pending:
            if len(got.get(b, {})) == len(b):
                complete(b)
            else:
                self.bar.start(b)
        jobs = [(b, i) for b in pending if b not in made for i in range(len(b))
                if i not in got.get(b, {})]
        if jobs:
            self.runner.measure_stages(jobs, on_result=done)
        return made

    @property
    def runner(self):
        if self._runner is None:
            from mcap.runner import open_runner  # torch is imported only when measuring
            self._runner = self._stack.enter_context(  # every GPU for many partitionings
                open_runner(self.spec, self.setup, timeout=self.timeout, wide=True))
        return self._runner

    def measure_stages(self, jobs) -> list:
        """Stages run alone (``Runner.measure_stages``): each ``(balance, stage)`` of
        ``jobs``, recorded in the store and counted on the bar as it ends; their
        StageRuns in ``jobs`` order."""
        def done(run):
            self._record_stage(run)
            self.measured += 1
            note = self._with_tasks(_stage_note(run))
            self.bar.advance(run.balance, measured=True, note=note)
            self._report(run.balance)
        return self.runner.measure_stages(jobs, on_result=done)

    def _record_stage(self, run) -> None:
        """A stage run alone, stored the moment it arrives under the machine that measured
        it (a cluster's task reports its own; issue 42)."""
        self.store.record_stage(self.study, run, job=self.job,
                                machine=run.machine or self.machine)

    def _with_tasks(self, note: str) -> str:
        """``note`` and the executor's tasks by node (issue 42, item 4)."""
        tasks = self._runner.tasks() if self._runner is not None else None
        return f"{note}  [{tasks.describe()}]" if tasks is not None else note

    def estimate(self, run: Run) -> Run:
        """``run`` with its throughput estimated from its stages' times (a composed run
        of stages run alone), over this machine's measured link; unchanged without times
        or when it has a throughput already."""
        if run.times is None or run.samples_per_second is not None or run.status != "ok":
            return run
        return dataclasses.replace(run, samples_per_second=self.runner.estimate(run.times),
                                   estimated=True)

    def estimate_link(self):
        """The link (``mcap.core.stagetime.Link``) this measurer's estimates were made over;
        None when none was made here (no runner opened, or runs whose stages ran together;
        runs taken from the store keep the estimate they were stored with)."""
        return getattr(self._runner, "estimate_link", None) if self._runner is not None \
            else None

    def _report(self, balance, current: bool = False) -> None:
        if self.job is not None:
            self.store.update_job(self.job, done=self.bar.done, total=self.bar.total,
                                  current=balance if current else None)

    def close(self) -> None:
        self._stack.close()


def remote_executor() -> bool:
    """Whether this process's runners send their measurements to a cluster (issue 42)."""
    from mcap.runner.executors import configured
    return configured()[0].remote


def _stage_note(run) -> str:
    """A stage run alone, for the progress line: which stage, and its peak or status."""
    head = f"stage {run.stage}"
    if run.status == "ok":
        return f"{head}: {run.peak / 2**20:.1f} MiB"
    return f"{head}: {run.status}"


def _note(run: Run) -> str:
    if run.status == "ok":
        return f"peak {run.peak / 2**20:.1f} MiB"
    return run.status


@contextlib.contextmanager
def sigterm_cancels() -> Iterator[None]:
    """Turn SIGTERM into ``Cancelled`` for the duration (main thread only)."""
    def handler(signum, frame):
        raise Cancelled()
    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def job_status(store: Store, job: Optional[int], study=None, total: int = 0) -> Iterator[None]:
    """Mark a dashboard job running (with its real total), then done / failed / cancelled
    on the way out."""
    if job is None:
        yield
        return
    store.update_job(job, status="running", study=study, total=total, done=0)
    try:
        yield
    except Cancelled:
        store.update_job(job, status="cancelled", current=None)
        raise
    except KeyboardInterrupt:
        store.update_job(job, status="cancelled", current=None, error="interrupted")
        raise
    except BaseException as exc:
        store.update_job(job, status="failed", current=None, error=str(exc) or type(exc).__name__)
        raise
    store.update_job(job, status="done", current=None)


def model_info(spec: str, setup: Optional[Setup] = None) -> ModelInfo:
    """The model's layers and parameter bytes, built on the meta device (no memory).

    With the ``setup`` a command will run, a model one of whose layers cannot fit the
    chosen device even alone (its weights, gradients and optimizer state; issue 41) is
    refused naming the layer's bytes and the device's memory (``mcap.core.fits``), before
    the whole-model check against this machine's memory and before anything is built."""
    from mcap.models import build_model
    from mcap.models.limits import check_parameter_bytes
    info = build_model(spec, device="meta").info
    if setup is not None:
        memory, where = device_memory(setup)
        if memory is not None:
            from mcap.core.fits import check_layers_fit
            check_layers_fit(info, memory, where, setup.optimizer)
    check_parameter_bytes(info.spec, sum(l.param_bytes for l in info.layers))  # before any run
    return info


def with_out_bytes(info: ModelInfo, setup: Setup) -> ModelInfo:
    """``info`` with each layer's output bytes per micro-batch under ``setup`` (its batch,
    micro-batches and precision), from one forward on the meta device (no memory): what
    the schedules' memory model (``mcap.core.schedules.memory``) reads a boundary's bytes
    from. The stage processes compute the same shapes (``mcap.runner.resident``)."""
    from mcap.models import build_model
    from mcap.runner import precision
    from mcap.runner.resident import nbytes, tensor_shapes
    built = build_model(info.spec, device="meta")
    module = precision.cast_module(built.module, setup)
    inputs, _ = built.example_batch(setup.batch_size)
    micro = inputs[: max(1, setup.batch_size // setup.chunks)]
    micro = precision.batch_on(micro, setup, micro.device)
    shapes = tensor_shapes(module, micro, "cuda" if setup.device == "cuda" else "cpu") \
        if setup.precision == "bf16-autocast" else tensor_shapes(module, micro)
    return dataclasses.replace(info, layers=tuple(
        dataclasses.replace(layer, out_bytes=nbytes(shapes[i]))
        for i, layer in enumerate(info.layers)))


def view_outputs(spec: str, setup: Setup) -> tuple[int, ...]:
    """The layers whose output is a view of their input (VGG11's ``flatten``), from one
    forward on the meta device. torch's zero-bubble backward (``stage_backward_input``)
    cannot detach a stage output that is a view, so under a split-backward schedule no
    chunk may end after one (``mcap.core.schedules.memory.split_plan``)."""
    import torch

    from mcap.models import build_model
    from mcap.runner import precision
    built = build_model(spec, device="meta")
    module = precision.cast_module(built.module, setup)
    inputs, _ = built.example_batch(setup.batch_size)
    x = precision.batch_on(inputs[: max(1, setup.batch_size // setup.chunks)], setup,
                           torch.device("meta"))
    out = []
    with torch.enable_grad():
        for i, layer in enumerate(module):
            x = layer(x)
            if any(isinstance(t, torch.Tensor) and t._is_view()
                   for t in (x if isinstance(x, (tuple, list)) else (x,))):
                out.append(i)
    return tuple(out)
def device_memory(setup: Setup) -> tuple[Optional[int], str]:
    """(bytes, what they are) a stage of ``setup`` may hold at most: its ``--capacity``, else
    the smallest visible GPU's memory on CUDA, else the memory this machine has available
    (every CPU stage process shares it); (None, why) when a GPU cannot be asked here."""
    if setup.capacity_bytes:
        return int(setup.capacity_bytes), f"each {setup.device} stage's --capacity"
    if setup.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            return None, "no CUDA device here"
        total = min(torch.cuda.get_device_properties(d).total_memory
                    for d in range(torch.cuda.device_count()))
        return int(total), f"the GPU ({torch.cuda.get_device_name(0)})"
    from mcap.models.limits import host_memory_bytes
    return host_memory_bytes(), "memory available on this machine"


def check_stages(info: ModelInfo, setup: Setup) -> None:
    if not 1 <= setup.stages <= info.num_layers:
        raise McapError(f"--stages {setup.stages}: the model {info.spec!r} has "
                        f"{info.num_layers} layers, so 1..{info.num_layers} stages are possible")
    from mcap.core import schedules
    schedules.get(setup.schedule).check(setup.stages, setup.virtual_stages, setup.chunks,
                                        info.num_layers)
