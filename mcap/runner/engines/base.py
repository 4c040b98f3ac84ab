"""The engine registry (ARCHITECTURE.md, "Add an engine"): the pipeline runtimes a run can
use. Importing this package does not import torch: an engine imports it inside its worker
side methods, so the CLI and the dashboard can list engines cheaply.

An engine says how many worker processes a run needs and whether they form a process
group (parent side), refuses a setup it cannot run on this machine (``check``), and on the
worker side builds what a process keeps between runs (``build``) and measures one run of a
balance (``run``: one ``StageResult`` per stage that process ran, measured with
``mcap.runner.train.Window``, which starts every run from the same clean state).
"""
from __future__ import annotations

from typing import ClassVar

from mcap.core.errors import McapError
from mcap.core.registry import Registry
from mcap.core.types import Setup


class Engine:
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    # Whether ``run`` takes ``press=`` (an MPress plan, mcap.runner.press.PressJob).
    press: ClassVar[bool] = False

    # --- parent side -----------------------------------------------------------------
    def processes(self, setup: Setup) -> int:
        """Worker processes one run of ``setup`` needs."""
        raise NotImplementedError

    def group(self, setup: Setup) -> bool:
        """Whether the workers join one process group (a rendezvous file is made)."""
        return self.processes(setup) > 1

    def check(self, setup: Setup, gpus: int) -> None:
        """Refuse, naming the values, a setup this engine cannot run with ``gpus`` GPUs."""
        if setup.device not in self.devices:
            raise McapError(f"engine {self.name} runs on {' or '.join(self.devices)} devices, "
                            f"not {setup.device}")
        if setup.device == "cuda" and gpus == 0:
            raise McapError("device cuda was asked for but no CUDA device was found; use device cpu")

    # --- worker side (torch) ------------------------------------------------------------
    def build(self, init):
        """Once per worker process: (resident state, ModelInfo). ``init`` is the
        ``mcap.runner.protocol.Init`` the pool sent."""
        raise NotImplementedError

    def run(self, resident, init, balance: tuple[int, ...]) -> tuple:
        """One measured run: the StageResults of the stages this process ran."""
        raise NotImplementedError


REGISTRY: Registry[Engine] = Registry("engine")
register, names, get = REGISTRY.register, REGISTRY.names, REGISTRY.get
