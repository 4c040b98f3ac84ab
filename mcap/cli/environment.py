"""The ``MCAP_*`` environment variables, each checked before a command runs (issue 38,
item 7).

Each variable is read by one module, which checks the value where it reads it (a bad value
is an ``McapError`` naming the variable and what it may be). A command would meet a bad
value only when it got there, after minutes of measuring, or never (``MCAP_CORUN=bogus``
was taken as on, silently). So ``mcap.cli.main`` asks every module's check first
(:func:`check`): a bad value exits 2 before anything runs, whatever the command. A
variable of this prefix that mcap does not read (a misspelt ``MCAP_STOER``) is warned
about. Every check here imports no torch (``plan`` and ``predict`` never do).
"""
from __future__ import annotations

import os
import sys
from typing import Callable

from mcap.core.errors import McapError


def _path(name: str) -> Callable[[], None]:
    def check() -> None:
        from mcap.files import paths
        text = os.environ.get(name)
        if text:
            paths.checked(text, f"${name}")
    return check


def _store_wait() -> None:
    from mcap.store.recovery import check_wait
    check_wait()


def _cache_dir() -> None:
    from mcap.runner.machinecache import check_folder
    check_folder()


def _corun() -> None:
    from mcap.runner.corun import enabled
    enabled()


def _isolation() -> None:
    from mcap.runner.isolation import asked_isolation
    asked_isolation()


def _slots() -> None:
    from mcap.runner.isolation import asked_slots
    asked_slots()


def _exchange() -> None:
    from mcap.runner.isolation import asked_exchange
    asked_exchange()


def _start() -> None:
    from mcap.runner.pool import start_method
    start_method()


def _cpu_processes() -> None:
    from mcap.runner.engines.base import max_cpu_processes
    max_cpu_processes()


def _traceback() -> None:
    text = os.environ.get("MCAP_TRACEBACK", "").strip()
    if text not in ("", "0", "1"):
        raise McapError(f"MCAP_TRACEBACK={text!r:.40} is not 0 or 1 (1 prints the traceback "
                        "of an internal error)")


def _executor() -> None:
    from mcap.runner.executors import chosen_name
    chosen_name()


def _executor_flag(name: str) -> Callable[[], None]:
    """An executor option's variable (``--retries`` and the like), parsed as the option is."""
    def check() -> None:
        from mcap.runner.executors import all_flags
        text = os.environ.get(name, "")
        for flag in all_flags():
            if flag.env == name and text.strip():
                flag.parse(text, f"${name}")
    return check


def _unchecked() -> None:
    """Read outside mcap's own code (bin/test's workers)."""


# name -> its check (None: fine; McapError naming it otherwise) and what it sets.
VARIABLES: dict[str, tuple[Callable[[], None], str]] = {
    "MCAP_STORE": (_path("MCAP_STORE"), "the results store (mcap.store.opening)"),
    "MCAP_STORE_WAIT": (_store_wait, "seconds a measured run waits for a busy store"),
    "MCAP_CACHE_DIR": (_cache_dir, "the machine cache's folder, or off"),
    "MCAP_CORUN": (_corun, "on or off: the co-run slowdown in throughput estimates"),
    "MCAP_ISOLATION": (_isolation, "stage or pipeline (--isolation)"),
    "MCAP_STAGE_SLOTS": (_slots, "stage processes run side by side"),
    "MCAP_EXCHANGE": (_exchange, "how stages sharing a GPU exchange tensors"),
    "MCAP_STAGE_START": (_start, "fork or spawn: how stage processes start"),
    "MCAP_MAX_CPU_PROCESSES": (_cpu_processes, "the CPU worker processes one run may start"),
    "MCAP_DATA_DIR": (_path("MCAP_DATA_DIR"), "the dashboard's data folder"),
    "MCAP_SPMD_STATUS": (_path("MCAP_SPMD_STATUS"), "set by mcap for its torchrun children"),
    "MCAP_TRACEBACK": (_traceback, "1 prints the traceback of an internal error"),
    "MCAP_TEST_WORKERS": (_unchecked, "bin/test's pytest workers"),
    "MCAP_EXECUTOR": (_executor, "where stage-alone measurements run (--executor)"),
    "MCAP_RETRIES": (_executor_flag("MCAP_RETRIES"), "--retries of a remote executor"),
    "MCAP_QUEUE_TIMEOUT": (_executor_flag("MCAP_QUEUE_TIMEOUT"), "--queue-timeout"),
    "MCAP_RAY_ADDRESS": (_executor_flag("MCAP_RAY_ADDRESS"), "--ray-address"),
    "MCAP_RAY_LOCAL_CPUS": (_executor_flag("MCAP_RAY_LOCAL_CPUS"), "--ray-local-cpus"),
    "MCAP_SLURM_PARTITION": (_executor_flag("MCAP_SLURM_PARTITION"), "--slurm-partition"),
    "MCAP_SLURM_TIME": (_executor_flag("MCAP_SLURM_TIME"), "--slurm-time"),
    "MCAP_SLURM_GPUS_PER_TASK": (_executor_flag("MCAP_SLURM_GPUS_PER_TASK"),
                                 "--slurm-gpus-per-task"),
    "MCAP_SLURM_ARRAY_PARALLELISM": (_executor_flag("MCAP_SLURM_ARRAY_PARALLELISM"),
                                     "--slurm-array-parallelism"),
    "MCAP_SLURM_FOLDER": (_executor_flag("MCAP_SLURM_FOLDER"), "--slurm-folder"),
    "MCAP_NO_PRELOAD": (_unchecked, "set by mcap for Ray's tracker worker (no torch import)"),
    "MCAP_WARM_ZYGOTE": (_unchecked, "set by mcap for Ray's CPU task workers (each keeps a "
                         "zygote and forks a stage process per task)"),
}
PREFIX = "MCAP_"


def check() -> None:
    """Every set variable's check (McapError naming the first bad one); a warning for each
    variable of the prefix that mcap does not read."""
    for name in sorted(n for n in os.environ if n.startswith(PREFIX)):
        if name in VARIABLES:
            VARIABLES[name][0]()
        else:
            print(f"mcap: warning: ${name[:60]} is not a variable mcap reads (they are "
                  f"{', '.join(VARIABLES)}); it is ignored", file=sys.stderr)
