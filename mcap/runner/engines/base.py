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

import os
from typing import ClassVar, Optional

from mcap.core import numbers
from mcap.core.errors import McapError
from mcap.core.registry import Registry
from mcap.core.types import Setup

# CPU worker processes one run may start on this machine: each is a training process with
# its own memory (a forked stage), so a typo such as ``--plan 4:tp1000`` would start a
# thousand. A machine with the cores and memory for more raises it with this variable.
MAX_CPU_PROCESSES = 64
CPU_PROCESSES_ENV = "MCAP_MAX_CPU_PROCESSES"


def max_cpu_processes() -> int:
    """The CPU process cap: ``$MCAP_MAX_CPU_PROCESSES`` when set, else MAX_CPU_PROCESSES."""
    text = os.environ.get(CPU_PROCESSES_ENV)
    if text is None or not text.strip():
        return MAX_CPU_PROCESSES
    value = numbers.whole(text)  # ASCII digits only ("²".isdigit() is True)
    if value is None or not 1 <= value <= 10**7:
        raise McapError(f"{CPU_PROCESSES_ENV}={text!r:.40} is not a whole number of processes "
                        ">= 1")
    return value


def check_processes(processes: int, device: str, gpus: Optional[int] = None,
                    what: str = "this run") -> None:
    """Refuse, before any process starts, a count of worker processes this machine cannot
    give: on the CPU more than :func:`max_cpu_processes`; on CUDA (``gpus`` counted) more
    than one per GPU. The one check every engine and the multi-node launcher ask."""
    if device == "cpu":
        cap = max_cpu_processes()
        if processes > cap:
            raise McapError(f"{what} needs {processes:,} CPU processes (one per device) but "
                            f"at most {cap} may be started on this machine; set "
                            f"{CPU_PROCESSES_ENV} to allow more where the cores and memory "
                            "are there")
    elif device == "cuda" and gpus is not None and processes > gpus:
        raise McapError(f"{what} needs {processes:,} CUDA devices (one per process) but this "
                        f"machine has {gpus}")


class Engine:
    """Capabilities are flags, read by the runner, the zygote, the CLI and the multi-node
    code (never the engine's name):

    - ``devices``: where it runs (cpu, cuda).
    - ``press``: ``run`` takes ``press=`` (an MPress plan, ``mcap.runner.press.apply.PressJob``).
    - ``alone``: its stages can be measured alone (``mcap.runner.alone``): ``run`` then takes
      ``stage=`` and runs that stage of the balance over a fake process group when the
      pool's ``Init.alone`` is set.
    - ``plans``: it runs CAPTURE's hybrid plans (``Runner.measure_plan``; ``Setup.stages``
      counts devices); ``plans_engine()`` names it.
    - ``across_nodes``: its ranks may be torchrun ranks on several nodes
      (``mcap.runner.spmdrunner``).
    - ``prebuilds``: its workers build ``mcap.runner.pipelining``'s resident model, so the
      CPU zygote builds it once before forking them.
    - ``exchange``: stages sharing a GPU exchange through ``mcap.runner.exchange`` (the CUDA
      meter names how)."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    press: ClassVar[bool] = False
    alone: ClassVar[bool] = False
    plans: ClassVar[bool] = False
    across_nodes: ClassVar[bool] = False
    prebuilds: ClassVar[bool] = False
    exchange: ClassVar[bool] = False

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
        if setup.device == "cpu":  # CUDA: each engine says whether its stages may share a GPU
            check_processes(self.processes(setup), "cpu",
                            what=f"a run of {setup.stages} devices on engine {self.name}")

    # --- worker side (torch) ------------------------------------------------------------
    def build(self, init):
        """Once per worker process: (resident state, ModelInfo). ``init`` is the
        ``mcap.runner.protocol.Init`` the pool sent."""
        raise NotImplementedError

    def run(self, resident, init, balance: tuple[int, ...], press=None, stage=None) -> tuple:
        """One measured run: the StageResults of the stages this process ran. ``press``
        only when the engine has ``press``; ``stage`` only when it has ``alone`` (and
        ``init.alone`` is set): the one stage this process runs alone."""
        raise NotImplementedError


REGISTRY: Registry[Engine] = Registry("engine")
register, names, get = REGISTRY.register, REGISTRY.names, REGISTRY.get


def plans_engine() -> str:
    """The engine that runs CAPTURE's hybrid plans (the one flagged ``plans``)."""
    return next(e.name for e in REGISTRY if e.plans)


def across_nodes() -> tuple[str, ...]:
    """The engines whose runs may go across nodes (``across_nodes``)."""
    return tuple(e.name for e in REGISTRY if e.across_nodes)
