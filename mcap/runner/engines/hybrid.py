"""Engine ``hybrid``: CAPTURE's hybrid plans (section III), one persistent process per
device; a stage is pipeline (1 device), data-parallel (DDP over the stage's devices) or
tensor-parallel (``torch.distributed.tensor.parallel``). The stage logic, what is sharded
and what is replicated, is in ``mcap.runner.capture`` (``device.py`` and its parts). A
run's "balance" is a HybridPlan's stages (``Runner.measure_plan``) or a plain balance (a
pipeline-only plan), and ``Setup.stages`` is the number of devices.

Alone (isolation ``stage``, the default; :mod:`mcap.runner.alone`): each device of a plan is
one job, run in a slot process that joins a fake group of the plan's devices as that rank
(``mcap.runner.capture.device.run_device(..., alone=True)``), so an 8-device plan is measured on one
GPU, or on the CPU's slots, rank by rank."""
from __future__ import annotations

from datetime import timedelta

from mcap.core.errors import McapError
from mcap.runner.engines.base import Engine, register


@register
class Hybrid(Engine):
    name = "hybrid"
    label = "hybrid (pipeline + data/tensor-parallel stages)"
    help = ("CAPTURE hybrid plans such as 3,3,10:tp2: one process per device, DDP or tensor "
            "parallelism inside a stage, GPipe between stages; CPU processes or one CUDA "
            "device per process")

    alone = True  # each device alone over a fake process group (mcap.runner.alone)
    plans = True  # CAPTURE's hybrid plans
    across_nodes = True  # a rank per device, on any node (mcap.runner.spmdrunner)
    prebuilds = True  # builds pipelining's resident model (the zygote builds it first)

    def processes(self, setup):
        return setup.stages  # devices

    def check(self, setup, gpus):
        super().check(setup, gpus)
        if setup.schedule != "gpipe":
            raise McapError(f"engine hybrid runs only the gpipe schedule, not "
                            f"{setup.schedule!r}")
        if setup.device == "cuda" and gpus < setup.stages:
            raise McapError(f"engine hybrid runs its devices together with one CUDA device "
                            f"each: {setup.stages} asked for, {gpus} found (with isolation "
                            "stage, the default, they run alone on the GPUs there are)")

    def build(self, init):
        import torch
        import torch.distributed as dist

        from mcap.runner import pipelining

        setup = init.setup
        if setup.device == "cuda":
            torch.cuda.set_device(pipelining.stage_device(setup, init.rank))
        if init.init_file:
            dist.init_process_group("nccl" if setup.device == "cuda" else "gloo",
                                    init_method=f"file://{init.init_file}",
                                    rank=init.rank, world_size=init.world,
                                    timeout=timedelta(seconds=init.pg_timeout))
        resident, info = pipelining.build_resident(init.spec, setup)
        return (resident, {}), info  # {}: the stage sub-groups, made once and kept

    def run(self, resident, init, balance, stage=None):
        from mcap.runner.capture import device
        res, groups = resident
        if init.alone:  # this process runs device ``stage`` alone, on its slot's GPU
            return (device.run_device(res, init.setup, balance, stage, groups,
                                      local_device=init.rank, alone=True),)
        return (device.run_device(res, init.setup, balance, init.rank, groups),)
