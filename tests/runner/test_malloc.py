"""Stage processes start with glibc malloc's thresholds fixed (``mcap.runner.heap.MALLOC_ENV``), so
the pages an op faults in, and so its time, do not depend on what the process freed before
(bench/log/2026-11-26-session-6-malloc-throughput.md: a partitioning's own runs spread p90
9-11% instead of 12-32%)."""
import os
import platform
import subprocess
import sys

import pytest

from mcap.core.types import Setup
from mcap.runner.heap import MALLOC_ENV
from mcap.runner.machine import process_env, thread_env

glibc = pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
                           reason="glibc's malloc and /proc only")

# Allocates, writes and frees a block of 20 MB three times: the page faults of each. With
# glibc's defaults the first block gets its own mmap (over the 128 KiB threshold) and gives
# its pages back when freed; that free raises the threshold, so the second block comes from
# the heap but grows it (faults again), and only the third reuses pages: the same op faults
# or not by what the process freed before, which made stage times depend on its history.
PROBE = r"""
import ctypes, resource
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
n = 20_000_000
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    p = libc.malloc(n); libc.memset(p, 1, n); libc.free(p)
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(extra: dict) -> list[int]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(extra)
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    return [int(x) for x in out.split()]


def test_the_process_env_is_the_threads_and_the_fixed_thresholds():
    env = process_env(3)
    assert env == {**thread_env(3), **MALLOC_ENV}
    assert env["OMP_NUM_THREADS"] == "3"
    assert int(env["MALLOC_MMAP_THRESHOLD_"]) >= 1 << 30  # over any block a stage reuses
    assert int(env["MALLOC_TRIM_THRESHOLD_"]) >= int(env["MALLOC_MMAP_THRESHOLD_"])


@glibc
def test_fixed_thresholds_reuse_the_heap_where_the_defaults_fault_pages_in_again():
    default = _faults({})
    fixed = _faults(MALLOC_ENV)
    page_count = 20_000_000 // 4096
    # Defaults: the first two blocks fault their pages in, the third by then does not.
    assert default[0] > page_count // 2 and default[1] > page_count // 2, default
    # Fixed: the first block grows the heap; the next two reuse it without a fault.
    assert fixed[0] > page_count // 2 and fixed[1] < 50 and fixed[2] < 50, fixed


@glibc
@pytest.mark.integration
def test_stage_processes_and_their_zygote_start_with_the_fixed_thresholds(monkeypatch):
    from mcap.runner import open_runner

    monkeypatch.setenv("MALLOC_MMAP_THRESHOLD_", "131072")  # the caller's own: overridden
    with open_runner("vgg11:image_size=32,hidden=64", Setup(stages=2, batch_size=4, chunks=2),
                     timeout=120) as runner:
        assert runner.measure((16, 14)).status == "ok"
        pids = [w.pid for w in runner._pool.workers]
        envs = []
        for pid in pids:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                envs.append(dict(item.split(b"=", 1) for item in fh.read().split(b"\0")
                                 if b"=" in item))
    assert len(envs) == 2
    for env in envs:
        for name, value in MALLOC_ENV.items():
            assert env[name.encode()] == value.encode()


@glibc
def test_a_stage_process_gives_its_free_heap_back_between_runs():
    """With the fixed thresholds a process keeps what it frees; ``clean_slate`` (the start of
    every run) gives it back, so a run starts from the same heap whatever ran before and a
    worker does not sit on an earlier run's memory."""
    probe = r"""
import gc, torch
from mcap.runner.train import clean_slate
def rss():
    return int(open("/proc/self/statm").read().split()[1]) * 4096
base = rss()
blocks = [torch.ones(10_000_000) for _ in range(3)]  # 120 MB
del blocks
gc.collect()
kept = rss() - base
clean_slate([torch.device("cpu")])
print(kept, rss() - base)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(MALLOC_ENV)
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True,
                         timeout=120, check=True, cwd=os.path.dirname(os.path.dirname(
                             os.path.dirname(os.path.abspath(__file__))))).stdout
    kept, after = (int(x) for x in out.split())
    assert kept > 100_000_000, kept  # freed, but still the process's
    assert after < 10_000_000, (kept, after)  # given back
