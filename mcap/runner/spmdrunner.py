"""A runner whose stages are ``torchrun`` ranks, possibly on several nodes (issue 15, item 8:
``profile`` and ``sweep`` across nodes; ``mcap.cli.spmd_run`` starts it).

Under torchrun every rank has joined one process group. Rank 0 runs the mcap command itself
(``profile``, ``sweep``: the store, the profiling plan, its oom fallback, the progress and
the output file are the local ones, unchanged) with :func:`mcap.runner.runner_override` set
to a :class:`SpmdRunner`; every other rank runs :func:`follow`. For each run rank 0
broadcasts ``(spec, setup, balance)``, every rank trains its stage exactly as a stage
process does (:func:`mcap.runner.pipelining.run_stage`, from the same clean slate, so the
peaks follow the history-free rules), and the stage results are gathered on rank 0, which
makes the Run as :class:`mcap.runner.Runner` does. A rank (re)builds its model when the
spec or setup changes (CAPTURE's batch sizes, the layer merger's real layers). When rank 0
is done, however it ends, it broadcasts ``None`` and every rank leaves.

The machine of the runs: every rank reports its fingerprint (:mod:`mcap.core.machine`); when
all are equal (identical nodes) the runs carry it, otherwise they carry none ("machine
unknown"), since no single machine measured them.

Engine hybrid (``profile --parallel dp,tp --nnodes N``): rank d is device d of the plan and
trains its part as a hybrid device process does (:func:`mcap.runner.capture.device.run_device`), the
pipeline-only runs as plans of one-device stages. A plan may use fewer devices than there
are ranks (a 2-way sub-mesh profiled alone on 2 of 4 devices: the whole model as one dp/tp
stage, ``mcap.workflow.capture.parallel``); the ranks past its devices train nothing but still join
the creation of its stages' sub-groups, which is collective over all ranks, and report no
result.
"""
from __future__ import annotations

import gc
import os
import time
from typing import Sequence

from mcap.core.errors import McapError
from mcap.core.types import Run, Setup
from mcap.runner.results import run_of




class _Rank:
    """This rank's side of every run: the model built once per (spec, setup)."""

    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.local = int(os.environ.get("LOCAL_RANK", self.rank))
        self._key = None
        self._resident = None
        self._groups: dict = {}  # engine hybrid's stage sub-groups, made once and kept

    def stage(self, spec: str, setup: Setup, job):
        """Train this rank's stage of ``job`` (a balance; under engine hybrid a balance or a
        HybridPlan); its StageResult, or None for a rank past the plan's devices."""
        from mcap.runner.machine import pin_threads
        from mcap.runner.pipelining import build_resident, run_stage
        from mcap.runner.protocol import StageResult

        from mcap.runner import engines
        hybrid = engines.get(setup.engine).plans
        try:
            if hybrid and self.rank >= setup.stages:
                from mcap.runner.capture.groups import join_groups
                join_groups(self._groups, job)  # collective over every rank (module docstring)
                return None
            if self._key != (spec, setup):
                self._resident = None
                gc.unfreeze()
                gc.collect()
                pin_threads(setup.threads)  # as the runner's stage processes are
                self._resident, _ = build_resident(spec, setup)
                self._key = (spec, setup)
                gc.collect()
                gc.freeze()
            if hybrid:
                from mcap.runner.capture.device import run_device
                return run_device(self._resident, setup, job, self.rank, self._groups,
                                  local_device=self.local)
            return run_stage(self._resident, setup, job, self.rank, local_device=self.local)
        except Exception as exc:  # noqa: BLE001 - reported as a failed run, like a stage process
            return StageResult(stage=self.rank, status="failed",
                               error=f"rank {self.rank}: {type(exc).__name__}: {exc}")

    def machine(self, setup: Setup):
        from mcap.runner.machine import collect_here
        return collect_here(setup)


def follow() -> None:
    """Every rank but 0: train each run rank 0 broadcasts, until it broadcasts None."""
    me = _Rank()
    while True:
        box = [None]
        me.dist.broadcast_object_list(box, src=0)
        if box[0] is None:
            return
        what, spec, setup, balance = box[0]
        if what == "machine":
            me.dist.gather_object(me.machine(setup), None, dst=0)
            continue
        result = me.stage(spec, setup, balance)
        me.dist.gather_object(result, None, dst=0)


class _Leader:
    """Rank 0: sends runs to every rank; one per process (the process group's)."""

    def __init__(self):
        self.me = _Rank()
        if self.me.rank != 0:
            raise McapError("only rank 0 leads the runs")
        self._machines: dict = {}
        self.stopped = False

    def measure(self, spec: str, setup: Setup, job, balance: tuple[int, ...] = None) -> Run:
        """One run of ``job`` on the ranks (``balance``: the Run's, default ``job`` itself);
        engine hybrid may leave ranks past ``setup.stages`` devices idle."""
        world = self.me.world
        from mcap.runner import engines
        plans = engines.get(setup.engine).plans  # a plan may leave ranks idle
        if setup.stages > world or (setup.stages != world and not plans):
            raise McapError(f"setup has {setup.stages} stages but torchrun started "
                            f"{world} ranks (--stages must equal the ranks of all nodes)")
        self.me.dist.broadcast_object_list([("run", spec, setup, job)], src=0)
        start = time.monotonic()
        mine = self.me.stage(spec, setup, job)
        results = [None] * world
        self.me.dist.gather_object(mine, results, dst=0)
        return run_of(tuple(job) if balance is None else balance, results[:setup.stages],
                      time.monotonic() - start, setup)

    def machine(self, setup: Setup):
        """Every rank's fingerprint; the common one, or None when the nodes differ."""
        if setup not in self._machines:
            self.me.dist.broadcast_object_list([("machine", None, setup, None)], src=0)
            found = [None] * self.me.world
            self.me.dist.gather_object(self.me.machine(setup), found, dst=0)
            keys = {m.key() for m in found}
            self._machines[setup] = found[0] if len(keys) == 1 else None
        return self._machines[setup]

    def stop(self) -> None:
        if not self.stopped:
            self.stopped = True
            self.me.dist.broadcast_object_list([None], src=0)


class SpmdRunner:
    """Rank 0's runner for one model and setup: the interface of :class:`mcap.runner.Runner`
    the workflows use (``measure``, ``machine``, ``model_info``, a context manager)."""

    alone = False  # every run is one torchrun across the nodes: nothing to fan out

    def tasks(self):
        """No task tally: each run is one torchrun (``Runner.tasks``)."""
        return None

    def __init__(self, leader: _Leader, spec: str, setup: Setup, *, timeout: float = 300.0):
        from mcap.models.spec import check_trusted, parse_spec
        from mcap.runner import check_setup

        parse_spec(spec)
        check_trusted(spec)
        check_setup(setup)
        from mcap.runner import engines
        if setup.engine not in engines.across_nodes():
            raise McapError(f"across nodes only engines {' and '.join(engines.across_nodes())} "
                            f"run; this setup asks for {setup.engine}")
        self.leader, self.spec, self.setup = leader, spec, setup
        self._info = None

    @property
    def model_info(self):
        """The model's layers, built on the meta device (no memory, no rank involved)."""
        if self._info is None:
            from mcap.models import build_model
            self._info = build_model(self.spec, device="meta").info
        return self._info

    @property
    def machine(self):
        return self.leader.machine(self.setup)

    def measure(self, balance: Sequence[int], press=None) -> Run:
        from mcap.runner import check_balance

        if press is not None:
            raise McapError("MPress plans are not run across nodes")
        balance = check_balance(balance, self.setup.stages, self.model_info.num_layers)
        return self.leader.measure(self.spec, self.setup, balance)

    def measure_plan(self, plan) -> Run:
        """A hybrid plan on the ranks, as :meth:`mcap.runner.Runner.measure_plan` (engine
        hybrid, ``setup.stages`` = its devices): peaks per device, in stage order."""
        from mcap.runner import runnable_plan

        plan = runnable_plan(plan, self.setup, self.model_info.num_layers)
        return self.leader.measure(self.spec, self.setup, plan, plan.balance)

    def close(self) -> None:
        pass  # the ranks stay for the next runner; the leader's stop() ends them

    def __enter__(self) -> "SpmdRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
