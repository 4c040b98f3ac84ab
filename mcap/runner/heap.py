"""How stage processes use the C library's heap, so that an op's time does not depend on
what the process ran before (issue 25; bench/log/2026-11-26-session-6-malloc-throughput.md). No
torch, no mcap imports:
``mcap.runner.machine`` (the process environment) and ``mcap.runner.train`` (each run's
clean slate) both use it.
"""
from __future__ import annotations

import ctypes

# glibc's malloc starts by giving blocks over 128 KiB their own mmap, returned to the
# kernel when freed, and raises that threshold as the process frees larger blocks (its
# "dynamic threshold"); trimming gives the heap's free top back too. So how many pages an
# op faults in, and so its time, depends on what the process freed before: a VGG11
# iteration (image 32, batch 8 x 4, 1 thread) took 0.33 s with 55,000-64,000 page faults,
# or in another process 0.24 and 0.32 s alternately, and 0.23 s with no faults once both
# thresholds are fixed (bench/log/2026-11-26-session-6-malloc-throughput.md). Fixed, and the
# free heap given back
# before each run (give_back_heap), every stage process times its ops from the same heap
# state: a partitioning's own runs spread p90 9-11% instead of 12-32%.
# Peaks are unchanged: the CPU counter (mcap.runner.memtrack) counts tensors' bytes, not
# pages. Other C libraries ignore these variables.
MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(4 << 30), "MALLOC_TRIM_THRESHOLD_": str(16 << 30)}


def give_back_heap() -> None:
    """Return the heap's free memory to the kernel (glibc's ``malloc_trim(0)``; elsewhere
    nothing). With MALLOC_ENV a process keeps what it freed, so a stage process calls this
    between runs (``mcap.runner.train.clean_slate``): every run then starts from a heap
    with nothing free in it whatever ran before, and what an earlier run freed does not sit
    idle in a worker while the machine runs others."""
    global _trim
    if _trim is None:
        try:
            _trim = ctypes.CDLL(None).malloc_trim
            _trim.argtypes, _trim.restype = [ctypes.c_size_t], ctypes.c_int
        except (OSError, AttributeError):  # not glibc
            _trim = False
    if _trim:
        _trim(0)


_trim = None
