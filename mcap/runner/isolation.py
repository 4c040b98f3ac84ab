"""How a runner measures: each stage alone (isolation ``stage``, the default) or the stages
together (``pipeline``), and how many stages run alone side by side (issue 25). Read by the
runner, the machine fingerprint (``mcap.runner.machine.meter``) and the CLI's
``--isolation`` (``mcap.cli.options.isolation_env``)."""
from __future__ import annotations

import os
from typing import Optional

from mcap.core import numbers
from mcap.core.errors import McapError
from mcap.core.types import Setup

ISOLATIONS = ("stage", "pipeline")
ISOLATION_ENV = "MCAP_ISOLATION"
SLOTS_ENV = "MCAP_STAGE_SLOTS"
EXCHANGE_ENV = "MCAP_EXCHANGE"
EXCHANGES = ("auto", "ipc", "host", "store")  # mcap.runner.exchange says what each does


def asked_isolation() -> Optional[str]:
    """``$MCAP_ISOLATION`` (None when unset or empty); McapError naming a bad value."""
    asked = os.environ.get(ISOLATION_ENV) or None
    if asked is not None and asked not in ISOLATIONS:
        raise McapError(f"{ISOLATION_ENV}={asked!r:.40} is not one of {', '.join(ISOLATIONS)}")
    return asked


def asked_slots() -> Optional[int]:
    """``$MCAP_STAGE_SLOTS`` (None when unset or empty); McapError naming a bad value."""
    text = os.environ.get(SLOTS_ENV, "").strip()
    if not text:
        return None
    value = numbers.whole(text)  # ASCII digits only ("²".isdigit() is True)
    if value is None or not 1 <= value <= 1024:
        raise McapError(f"{SLOTS_ENV}={text!r:.40} is not a whole number of processes "
                        "from 1 to 1024")
    return value


def asked_exchange() -> str:
    """``$MCAP_EXCHANGE`` (default auto); McapError naming a bad value."""
    asked = os.environ.get(EXCHANGE_ENV, "auto")
    if asked not in EXCHANGES:
        raise McapError(f"{EXCHANGE_ENV}={asked!r:.40}: expected one of {', '.join(EXCHANGES)}")
    return asked


def resolve_isolation(isolation: Optional[str], engine) -> str:
    """How a runner measures (DESIGN.md, "Where it runs"): ``stage`` (the default) runs
    each stage alone in its own process over a process group that moves no data
    (:mod:`mcap.runner.alone`), the memory truth; ``pipeline`` runs the stages together,
    the data flowing between them, the run whose time is real. ``None`` reads
    ``$MCAP_ISOLATION``. Engines that cannot run stages alone run them together: torchgpipe
    (one process, every stage on its own GPU already). Engine hybrid runs each device (a
    dp/tp rank or a pipeline stage) alone."""
    asked = isolation if isolation is not None else (asked_isolation() or "stage")
    if asked not in ISOLATIONS:
        raise McapError(f"isolation {asked!r} is not one of {', '.join(ISOLATIONS)}")
    if asked == "stage" and not engine.alone:
        return "pipeline"
    return asked


def stage_slots(setup: Setup, wide: bool = False) -> int:
    """Stage processes that run stages alone side by side: on CUDA one per GPU (a stage's
    times are its own only when it has the GPU to itself; its peak is its own either way),
    on the CPU one per ``Setup.threads`` cores, at most one per stage; ``wide`` (a command
    with many partitionings to measure, issue 42): on CUDA every GPU of the machine, each
    measuring a stage at once, more than one partitioning's. ``$MCAP_STAGE_SLOTS``
    overrides."""
    asked = asked_slots()
    if asked is not None:
        return min(asked, setup.stages)
    if setup.device == "cuda":
        import torch
        gpus = torch.cuda.device_count()
        return max(1, gpus if wide else min(gpus, setup.stages))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(setup.stages, (cores or 1) // max(1, setup.threads)))
