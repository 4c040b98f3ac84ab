"""Resource limits checked before a model is built (issue 12): a model whose parameters
cannot fit in this machine's memory is refused with the numbers, never allocated.

The count is taken on the meta device (shapes only, no memory), so asking for
``vgg11:hidden=200000`` (160 GB of weights) costs nothing and exits 2 naming the sizes.
"""
from __future__ import annotations

import os

from mcap.core.errors import McapError


class TooLarge(McapError):
    """A model, batch or allocation that cannot fit in this machine's memory."""


def host_memory_bytes() -> int:
    """Memory this process could still get: MemAvailable, else total physical memory."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**62  # unknown: do not refuse on a guess


def _gib(n: int) -> str:
    return f"{n / 2**30:,.2f} GiB"


def check_parameter_bytes(spec: str, param_bytes: int, available: int | None = None) -> None:
    """Refuse a model whose weights alone exceed the memory available now."""
    available = host_memory_bytes() if available is None else available
    if param_bytes > available:
        raise TooLarge(f"model {spec!r} has {param_bytes:,} bytes of parameters ({_gib(param_bytes)}), "
                       f"more than the {available:,} bytes ({_gib(available)}) of memory available on "
                       f"this machine; choose smaller parameters")


def check_allocation(what: str, nbytes: int, available: int | None = None) -> None:
    """Refuse one tensor (an input batch) larger than the memory available now."""
    available = host_memory_bytes() if available is None else available
    if nbytes > available:
        raise TooLarge(f"{what} needs {nbytes:,} bytes ({_gib(nbytes)}), more than the "
                       f"{available:,} bytes ({_gib(available)}) of memory available on this machine")
