"""Measure one partitioning of one model under one setup, for real (issue 4, Runner).

    from mcap.runner import open_runner
    with open_runner("vgg11:image_size=32", Setup(stages=4, batch_size=32, chunks=4)) as runner:
        run = runner.measure((3, 3, 5, 19))      # mcap.core.types.Run
        runner.model_info                         # mcap.core.types.ModelInfo

A run trains ``ITERATIONS`` (2) full iterations — forward, backward, optimizer step — after
building the stages, and each stage's peak covers both. ``measure`` never raises for a run
that runs out of memory, crashes or hangs: it returns a Run with status "oom" or "failed"
and the message, and the next ``measure`` works (the stage processes are restarted when
one died or hung). It raises :class:`McapError` only for bad input: a balance that does
not fit, an unknown model, a setup this machine cannot run.

Engines (``Setup.engine``):
- ``pipelining`` — ``torch.distributed.pipelining``, one persistent process per stage
  (:mod:`mcap.runner.pipelining`). On the CPU each stage's peak is the byte-exact peak of
  tensor memory in its process (:mod:`mcap.runner.memtrack`), with a breakdown into weights,
  gradients, optimizer state and other at the moment of the peak. On CUDA it is
  ``torch.cuda.max_memory_allocated`` of the stage's GPU in that process (stages may share
  a GPU; each process reads its own allocator); no breakdown.
- ``torchgpipe`` — ``torchgpipe.GPipe`` over G CUDA devices in one process
  (:mod:`mcap.runner.torchgpipe_engine`).

Every run starts from one clean state (:func:`mcap.runner.train.clean_slate`), so its peaks
are those a fresh process of that stage reaches, whatever the stage process ran before;
``runner.machine`` is the fingerprint the peaks belong to (:mod:`mcap.core.machine`), with
the stage processes pinned to ``Setup.threads`` intra-op threads.

On the CPU the stage processes are forked by one zygote per runner that has imported torch
and built the model once (:mod:`mcap.runner.zygote`): a runner starts in about one torch
import, and a restart is a fork. CUDA stage processes are started as fresh processes
(a CUDA context does not survive a fork); ``MCAP_STAGE_START=spawn`` does so on the CPU too.

``timeout`` limits each run (from sending the job to the last stage's answer); starting the
stage processes has its own limit, ``max(STARTUP_TIMEOUT, timeout)``.

``Run.seconds`` is the wall time of ``measure`` once the stage processes are ready (send the
job, build the stages, train, gather); ``Run.samples_per_second`` is 2 x batch size over the
training window of the slowest stage.
"""
from __future__ import annotations

import contextlib
import time
from typing import Optional, Sequence

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.machine import Machine
from mcap.core.types import ModelInfo, Run, Setup, StageRun
from mcap.runner.isolation import (  # noqa: F401  (re-exported: how a runner measures)
    ISOLATION_ENV, ISOLATIONS, SLOTS_ENV, resolve_isolation, stage_slots,
)
from mcap.runner.protocol import ITERATIONS
from mcap.runner.results import run_of, stage_times

STARTUP_TIMEOUT = 300.0  # seconds for the stage processes to get ready

__all__ = ["open_runner", "runner_override", "Runner", "check_setup", "check_balance", "ITERATIONS"]


def runnable_plan(plan, setup: Setup, num_layers: int):
    """``plan`` (text or HybridPlan) as a HybridPlan a runner of ``setup`` can measure:
    engine hybrid, the model's layers, one device per stage process, micro-batches every
    degree splits. McapError naming the values otherwise (both runners share this)."""
    from mcap.core.capture.plan import as_plan, check_micro_batches, check_plan

    from mcap.runner import engines

    plan = as_plan(plan)
    if not engines.get(setup.engine).plans:
        raise McapError(f"plan {plan.text} needs engine {engines.plans_engine()}; this "
                        f"runner runs {setup.engine}")
    check_plan(plan, num_layers)
    if plan.devices != setup.stages:
        raise InvalidPartitioning(f"plan {plan.text} uses {plan.devices} devices but this "
                                  f"runner has {setup.stages}")
    check_micro_batches(plan, setup.batch_size, setup.chunks)
    return plan


def check_setup(setup: Setup) -> None:
    """Reject a setup no engine can run, naming the values (``mcap.core.setup``)."""
    from mcap.core.setup import check_setup as pure_check
    from mcap.runner import engines
    pure_check(setup, engines.names())


def check_balance(balance: Sequence[int], stages: int, num_layers: int) -> tuple[int, ...]:
    """The balance as a tuple of ints, or InvalidPartitioning naming what is wrong."""
    try:
        out = tuple(int(n) for n in balance)
    except (TypeError, ValueError):
        raise InvalidPartitioning(f"balance {balance!r} is not a list of layer counts") from None
    if len(out) != stages:
        raise InvalidPartitioning(f"balance {list(out)} has {len(out)} stages but the setup "
                                  f"has {stages}")  # (chunks: stages x virtual stages)
    if any(n < 1 for n in out):
        raise InvalidPartitioning(f"balance {list(out)} gives a stage no layers")
    if sum(out) != num_layers:
        raise InvalidPartitioning(f"balance sums to {sum(out)} but the model has {num_layers} "
                                  "layers")
    return out


def _check_machine(setup: Setup, alone: bool = False) -> None:
    """The engine refuses what this machine cannot run (GPUs are counted only for CUDA).
    ``alone``: the stages (engine hybrid: the devices) run alone, taking turns on one slot
    per GPU (:func:`stage_slots`), each with its GPU to itself while it runs, so the engine
    is asked as if every one had its own."""
    from mcap.runner import engines
    gpus = 0
    if setup.device == "cuda":
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if alone and gpus:
            gpus = max(gpus, setup.stages)
    engines.get(setup.engine).check(setup, gpus)


class Runner:
    """Persistent stage processes for one model and one setup; see the module docstring."""

    def __init__(self, model_spec: str, setup: Setup, *, timeout: float = 300.0,
                 isolation: Optional[str] = None, wide: bool = False):
        from mcap.models.spec import check_trusted, parse_spec  # pure: fails before any process

        from mcap.runner import engines

        from mcap.runner import executors

        check_setup(setup)
        engine = engines.get(setup.engine)
        self.isolation = resolve_isolation(isolation, engine)
        self.alone = self.isolation == "stage"
        # Where the stage-alone measurements run (issue 42): this machine's pool, or a
        # cluster's tasks (--executor, $MCAP_EXECUTOR), which checks its own resources.
        self.executor, settings = executors.configured()
        self.executor.check_setup(setup, together=not self.alone)
        if not self.executor.remote:
            _check_machine(setup, self.alone)
        parse_spec(model_spec)
        check_trusted(model_spec)  # user code only when typed or confirmed (the workers check too)
        if timeout <= 0:
            raise McapError(f"timeout must be positive, got {timeout}")
        self.setup, self.timeout = setup, float(timeout)
        # Starting may compile memtrack (~20 s once per environment) and build a big model,
        # so it gets its own, longer limit.
        self.startup_timeout = max(STARTUP_TIMEOUT, self.timeout)
        if self.alone:
            world = 0 if self.executor.remote else stage_slots(setup, wide)
            self._pool = self.executor.pool(model_spec, setup, settings, world=world,
                                            timeout=self.timeout, group=False,
                                            startup_timeout=self.startup_timeout, alone=True)
        else:
            self._pool = self.executor.pool(model_spec, setup, settings,
                                            world=engine.processes(setup),
                                            timeout=self.timeout, group=engine.group(setup),
                                            startup_timeout=self.startup_timeout, alone=False)
        self._closed = False
        # the link this runner's estimates were made over (``estimate``; None before one)
        self.estimate_link = None
        self.last_results: tuple = ()  # the StageResults of the latest run
        self._pool.start()

    @property
    def model_info(self) -> ModelInfo:
        """The model's layers (waits for the stage processes to have built it)."""
        if self._pool.info is None:
            # A stage process lost while starting (killed, out of host memory) gets one more
            # try; twice in a row is a broken environment, reported as such.
            for attempt in range(2):
                why = self._pool.wait_ready(time.monotonic() + self.startup_timeout)
                if not why:
                    break
                self._pool.restart()
            else:
                raise McapError(f"the stage processes did not start: {why}")
        return self._pool.info

    @property
    def machine(self) -> Machine:
        """Where this runner measures (mcap.core.machine): reported by the stage processes,
        with the intra-op threads they are pinned to (Setup.threads), and how the peaks
        are read (``Machine.meter``, ``mcap.runner.machine.meter``)."""
        self.model_info  # waits for the stage processes, as model_info does
        from mcap.runner.machine import with_meter
        return with_meter(self._pool.machine, self.setup, self.isolation)

    @property
    def slots(self) -> int:
        """Stage processes of this machine's pool (0 for a cluster's tasks)."""
        return int(getattr(self._pool, "world", 0))

    def tasks(self):
        """The pool's tasks done, running and queued by node (``mcap.core.tasks.TaskTally``),
        or None where the pool does not count them."""
        counted = getattr(self._pool, "tasks", None)
        return counted() if counted is not None else None

    @property
    def worker_pids(self) -> list[int]:
        """Process ids of the stage processes now serving (one per stage for pipelining)."""
        return self._pool.pids

    def measure(self, balance: Sequence[int], press=None) -> Run:
        """Measure one partitioning; a failure is a Run with status "oom" or "failed".
        ``press``: an MPress plan (``mcap.core.press.actions.PressPlan``) of this balance to
        apply (``mcap.runner.press.apply``)."""
        if self._closed:
            raise McapError("this runner is closed; open a new one with open_runner()")
        balance = check_balance(balance, self.setup.num_chunks, self.model_info.num_layers)
        if press is not None:
            from mcap.runner.press.check import check_plan
            check_plan(press, self.model_info.spec, self.setup, balance)
            if self.alone and any(a.action == "d2d" for stage in press.stages for a in stage):
                raise McapError("this plan moves activations into another stage's memory "
                                "(d2d), which only stages running together can do: measure "
                                "it with isolation pipeline (--isolation pipeline)")
        return self._run(balance, balance, press)

    def measure_stages(self, jobs, on_result=None) -> list:
        """Stages run alone (isolation ``stage``): one ``StageRun`` per ``(balance,
        stage)`` of ``jobs``, in that order; a failure is a record with its status.
        ``on_result(StageRun)`` is called as each one ends (record it at once: a sweep
        killed half-way keeps what it measured). How a sweep measures each distinct
        stage once (``mcap.workflow.reuse``)."""
        if self._closed:
            raise McapError("this runner is closed; open a new one with open_runner()")
        if not self.alone:
            raise McapError("measure_stages needs stages run alone (isolation stage); this "
                            f"runner runs them together ({self.isolation})")
        L = self.model_info.num_layers
        checked = []
        for balance, stage in jobs:
            balance = check_balance(balance, self.setup.num_chunks, L)
            if not (isinstance(stage, int) and 0 <= stage < self.setup.stages):
                raise McapError(f"stage {stage!r} is not a stage of balance {list(balance)}")
            checked.append((balance, stage))

        def record(job, result):
            return StageRun(job[0], job[1], result.status, result.peak, result.seconds,
                            stage_times([result])[0] if result.times is not None else None,
                            result.error, result.breakdown, node=result.node,
                            machine=result.machine)

        done, why = self._pool.run_stages(
            checked, on_result=None if on_result is None else
            (lambda job, result: on_result(record(job, result))))
        got = {job: record(job, result) for job, result in done}
        out = []
        for job in checked:
            if job not in got:
                run = StageRun(job[0], job[1], "failed", None,
                               error=why or "the stage did not finish")
                if on_result is not None:
                    on_result(run)
                got[job] = run
            out.append(got[job])
        return out

    def measure_plan(self, plan) -> Run:
        """Measure a hybrid plan (engine ``hybrid``, ``Setup.stages`` = its devices; CAPTURE
        III): a Run whose balance is the layers per stage and whose peaks (and breakdown)
        are per device, in stage order. ``last_results`` keeps each device's StageResult
        (its ``losses``: empty when the devices ran alone, whose data nobody sent). Bad
        plans raise McapError naming the values."""
        if self._closed:
            raise McapError("this runner is closed; open a new one with open_runner()")
        plan = runnable_plan(plan, self.setup, self.model_info.num_layers)
        return self._run(plan.balance, plan.stages)

    def _run(self, balance: tuple[int, ...], job, press=None) -> Run:
        why = self._pool.wait_ready(time.monotonic() + self.startup_timeout)
        if why:
            self._pool.restart()
            return Run(balance, "failed", None, 0.0, error=why)
        start = time.monotonic()
        results, why = self._pool.run(job, press)
        self.last_results = tuple(results)
        # Stages run alone: no run of them together was timed, so it is estimated from
        # their own times (hybrid ranks record no times yet: their throughput stays unknown).
        return run_of(balance, results, time.monotonic() - start, self.setup, why=why,
                      estimate=self.estimate if self.alone else None)

    def estimate(self, times) -> Optional[float]:
        """Samples per second of these stages run together, from their times alone
        (``mcap.core.stagetime``) over this machine's measured link, the stages slowing each
        other as measured (``mcap.runner.corun``); None without times."""
        if times is None:
            return None
        import dataclasses

        from mcap.core import stagetime
        from mcap.runner.corun import factors_for
        from mcap.runner.link import link_for
        if self.estimate_link is None:  # measured or read once per machine, kept a day
            info = self.model_info
            self.estimate_link = dataclasses.replace(link_for(self.setup), corun=factors_for(
                self._pool.spec, self.setup, info.num_layers,
                sum(layer.param_bytes for layer in info.layers)))
        s = self.setup
        # The local pool's zygote has torch's pipelining imported: it answers in a
        # millisecond what this process would spend a second or two importing for.
        ask = getattr(self._pool, "orders", None)
        order = ask(s.schedule, s.stages, s.virtual_stages, s.chunks) if ask else None
        if order is None:
            from mcap.runner.orders import generate
            order = generate(s.schedule, s.stages, s.virtual_stages, s.chunks)
        return stagetime.samples_per_second(times, s, self.estimate_link, order)

    def close(self) -> None:
        self._closed = True
        self._pool.close()

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_OVERRIDE = None  # see runner_override


def open_runner(model_spec: str, setup: Setup, *, timeout: float = 300.0,
                isolation: Optional[str] = None, wide: bool = False) -> Runner:
    """Start the stage processes for ``model_spec`` under ``setup``; use as a context manager.
    ``isolation``: ``stage`` or ``pipeline`` (:func:`resolve_isolation`); ``wide``: a
    command of many partitionings (profile, sweep), whose stages alone take every GPU of the
    machine (:func:`stage_slots`). Under :func:`runner_override` the override's factory
    makes the runner instead."""
    if _OVERRIDE is not None:
        return _OVERRIDE(model_spec, setup, timeout=timeout)
    return Runner(model_spec, setup, timeout=timeout, isolation=isolation, wide=wide)


@contextlib.contextmanager
def runner_override(factory):
    """Inside, :func:`open_runner` returns ``factory(spec, setup, timeout=...)``: how rank 0
    under torchrun runs an unchanged ``profile`` / ``sweep`` on the ranks of every node
    (:mod:`mcap.runner.spmdrunner`)."""
    global _OVERRIDE
    saved, _OVERRIDE = _OVERRIDE, factory
    try:
        yield
    finally:
        _OVERRIDE = saved
