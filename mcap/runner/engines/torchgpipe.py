"""Engine ``torchgpipe``: the paper's system (mCAP 3.5), ``torchgpipe.GPipe`` over G CUDA
devices in one process, each device's peak read with ``max_memory_allocated``. The run
logic is in ``mcap.runner.torchgpipe_engine``."""
from __future__ import annotations

from mcap.core.errors import McapError
from mcap.runner.engines.base import Engine, register


@register
class TorchGPipe(Engine):
    name = "torchgpipe"
    label = "torchgpipe (GPipe, one process)"
    help = "torchgpipe.GPipe: one process driving one CUDA device per stage, fill-drain schedule"
    devices = ("cuda",)

    def processes(self, setup):
        return 1

    def check(self, setup, gpus):
        if setup.device != "cuda":
            raise McapError("engine torchgpipe runs on CUDA devices only; use engine "
                            "pipelining on the CPU")
        super().check(setup, gpus)
        if gpus < setup.stages:
            raise McapError(f"engine torchgpipe needs {setup.stages} CUDA devices (one per "
                            f"stage) but found {gpus}; use engine pipelining, whose stage "
                            "processes can share a GPU")
        if setup.schedule != "gpipe":
            raise McapError(f"engine torchgpipe runs only the gpipe schedule, not "
                            f"{setup.schedule!r}")

    def build(self, init):
        from mcap.runner import torchgpipe_engine
        return torchgpipe_engine.build_resident(init.spec, init.setup)

    def run(self, resident, init, balance):
        from mcap.runner import torchgpipe_engine
        return torchgpipe_engine.run(resident, init.setup, balance)
