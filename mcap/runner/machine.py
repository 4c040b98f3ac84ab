"""Collect this machine's fingerprint (:class:`mcap.core.machine.Machine`) and pin the
intra-op threads of a stage process (issue 11).

A stage worker calls :func:`pin_threads` before it builds anything and reports
:func:`collect` in its Hello (``Runner.machine``). The parent may call :func:`collect` too
(``mcap.workflow.profiling`` looks up stored runs before any stage process starts): the
threads it records are then the ones the stage processes will be pinned to.
"""
from __future__ import annotations

import ctypes
import os
import platform
import re
from typing import Optional, Sequence

from mcap.core.machine import Machine
from mcap.core.types import Setup
from mcap.runner.heap import MALLOC_ENV

# The environment of a stage process: OpenMP and MKL read these when they start, before
# torch.set_num_threads can act, and oneDNN sizes its workspaces by the OpenMP threads.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_env(threads: int) -> dict[str, str]:
    return {name: str(int(threads)) for name in THREAD_VARIABLES}


def process_env(threads: int) -> dict[str, str]:
    """The environment a stage process (or a helper measuring the machine for one) starts
    with: ``threads`` intra-op threads and glibc's malloc thresholds fixed (MALLOC_ENV)."""
    return {**thread_env(threads), **MALLOC_ENV}


def pin_threads(threads: int) -> None:
    """Run this process's intra-op work on exactly ``threads`` threads."""
    import torch
    os.environ.update(thread_env(threads))
    torch.set_num_threads(int(threads))


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux), else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def driver_version() -> Optional[str]:
    """The NVIDIA driver version (``/proc/driver/nvidia/version``), else the CUDA version
    the driver supports (``cuDriverGetVersion``), else None."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as fh:
            m = re.search(r"Kernel Module\s+(?:for\s+\S+\s+)?([0-9][0-9.]*)", fh.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        version = ctypes.c_int()
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0:
            return f"CUDA {version.value // 1000}.{version.value % 1000 // 10} (driver API)"
    except (OSError, AttributeError):
        pass
    return None


def isa() -> str:
    """torch's CPU capability ("AVX2", "AVX512", ...; ``ATEN_CPU_CAPABILITY`` lowers it),
    plus oneDNN's ISA cap when the environment sets one: oneDNN picks its convolution
    kernels, and so their workspaces, by it (measured: ``ONEDNN_MAX_CPU_ISA=AVX`` moves a
    VGG11 stage of conv1..pool4 by 28.6 MB on an AVX2 machine)."""
    import torch

    out = str(torch.backends.cpu.get_cpu_capability())
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    return f"{out}, oneDNN max {cap.upper()}" if cap else out


CPU_METER = "memtrack/2"  # mcap.runner.memtrack with storages of deep copies counted


def meter(setup: Setup, isolation: Optional[str] = None) -> str:
    """How a runner of ``setup`` reads peaks (``Machine.meter``): the CPU tracker's version
    (the same whether stages run alone or together: tests/runner/test_alone.py checks it to the
    byte), and on CUDA whether stages run alone or together, and how they exchange."""
    from mcap.runner import engines
    from mcap.runner.isolation import resolve_isolation
    from mcap.runner import exchangemode as exchange

    how = resolve_isolation(isolation, engines.get(setup.engine))
    if setup.device == "cpu":
        mode = exchange.mode(False) if how == "pipeline" else None
        return CPU_METER if mode is None else f"{CPU_METER} pipeline-{mode}"
    if how == "stage":
        return "cuda/alone"
    if not engines.get(setup.engine).exchange:
        return f"cuda/{setup.engine}"
    import torch
    mode = exchange.mode(torch.cuda.device_count() < setup.stages)
    return f"cuda/pipeline-{mode or 'nccl'}"


def with_meter(machine: Optional[Machine], setup: Setup, isolation: Optional[str] = None
               ) -> Optional[Machine]:
    import dataclasses
    if machine is None:
        return None
    return dataclasses.replace(machine, meter=meter(setup, isolation))


def collect(setup: Setup, devices: Optional[Sequence[int]] = None,
            isolation: Optional[str] = None) -> Machine:
    """This machine as it runs ``setup``: CPU, ISA, the setup's threads, torch build, on
    CUDA the names of the GPUs ``devices`` (default: those the setup's stages use), and how
    a runner of ``isolation`` reads the peaks (:func:`meter`)."""
    import torch

    gpu = driver = None
    if setup.device == "cuda" and torch.cuda.is_available():
        found = torch.cuda.device_count()
        if devices is None:
            devices = range(min(setup.stages, found))
        names = list(dict.fromkeys(torch.cuda.get_device_name(d) for d in devices))
        gpu = ", ".join(names) or None
        driver = driver_version()
    return Machine(device=setup.device, cpu=cpu_model(), isa=isa(),
                   threads=int(setup.threads), torch=str(torch.__version__),
                   torch_git=getattr(torch.version, "git_version", None),
                   cuda=torch.version.cuda, gpu=gpu, driver=driver,
                   meter=meter(setup, isolation))


def collect_here(setup: Setup) -> Machine:
    """:func:`collect` from inside a pinned stage process: the threads are the ones torch
    really uses, so a pin that did not take shows as a different machine."""
    import dataclasses

    import torch
    return dataclasses.replace(collect(setup), threads=int(torch.get_num_threads()))
