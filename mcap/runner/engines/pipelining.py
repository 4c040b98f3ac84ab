"""Engine ``pipelining``: ``torch.distributed.pipelining``, one persistent process per stage
(gloo on CPU; NCCL when every stage has its own GPU; stages that share one pass tokens
through gloo and the tensors on the device, ``mcap.runner.exchange``). The stage logic is
in ``mcap.runner.pipelining``."""
from __future__ import annotations

from datetime import timedelta

from mcap.runner.engines.base import Engine, register


@register
class Pipelining(Engine):
    name = "pipelining"
    label = "pipelining (torch.distributed.pipelining)"
    help = ("torch.distributed.pipelining: one process per stage, GPipe or 1F1B; CPU stage "
            "processes or CUDA devices (stages may share a GPU)")

    alone = True  # stages run alone over a fake process group (mcap.runner.alone)
    across_nodes = True  # a rank per stage, on any node (mcap.runner.spmdrunner)
    prebuilds = True  # the zygote builds the resident model once before forking
    exchange = True  # stages sharing a GPU exchange through mcap.runner.exchange

    def processes(self, setup):
        return setup.stages

    def build(self, init):
        import torch
        import torch.distributed as dist

        from mcap.runner import pipelining

        setup = init.setup
        if setup.device == "cuda":
            torch.cuda.set_device(pipelining.stage_device(setup, init.rank))
        if init.init_file:
            backend = "nccl" if setup.device == "cuda" and not pipelining.shares_gpu(setup) \
                else "gloo"
            dist.init_process_group(backend, init_method=f"file://{init.init_file}",
                                    rank=init.rank, world_size=init.world,
                                    timeout=timedelta(seconds=init.pg_timeout))
        return pipelining.build_resident(init.spec, setup)

    press = True  # applies MPress plans (mcap.runner.press.apply)

    def run(self, resident, init, balance, press=None, stage=None):
        from mcap.runner import pipelining
        if init.alone:  # this process runs stage ``stage`` alone, on its slot's GPU
            return (pipelining.run_stage(resident, init.setup, balance, stage, press=press,
                                         local_device=init.rank, alone=True),)
        return (pipelining.run_stage(resident, init.setup, balance, init.rank, press=press),)
