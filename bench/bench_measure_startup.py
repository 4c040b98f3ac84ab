"""What a one-off ``measure`` costs against one torch import, and what a pool restart after
an out-of-memory run costs (issue 13, item 2: warm workers).

    python bench/bench_measure_startup.py [--repeats 3] [--modes fork,spawn]

Prints, each the median of ``--repeats``:
- ``python -c "import torch"`` wall time;
- ``python -m mcap measure --model vgg11:image_size=32 --balance 14,11,2,3`` wall time,
  with a fresh ``--store`` in a temporary directory each time, the machine's link already
  kept (``MCAP_CACHE_DIR``: the link and the co-run factors, measured once a day per
  machine and model, ``mcap.runner.machinecache``) and, once, on a machine seen first (an
  empty cache: both measured too), once per start mode
  (``fork``: the zygote of ``mcap.runner.zygote``, the default on CPU; ``spawn``: every stage
  process imports torch itself, ``MCAP_STAGE_START=spawn``), and the target
  2.5 x import + 1 s (issue 42; issue 13 asked for + 2 s);
- after a run that ran out of memory (``capacity`` below stage 2's peak): the time the OOM
  run took to return (it kills the pool and starts a new one) plus the time until the new
  pool is ready, i.e. what the next run waits before it can start.

The machine's load changes every figure; run it on a quiet machine to compare modes.

``--figures [--quick]`` prints bench/run.py's rows: the fork mode only, medians of 5
(``--quick``: one run of each).
"""
from __future__ import annotations

import argparse
import atexit
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

MODEL, BALANCE = "vgg11:image_size=32", "14,11,2,3"


def _env(mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    env.pop("MCAP_STAGE_START", None)
    if mode == "spawn":
        env["MCAP_STAGE_START"] = "spawn"
    return env


def wall(cmd: list[str], env: dict) -> float:
    start = time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {out.returncode}: {out.stderr[-2000:]}")
    return seconds


_KEPT = tempfile.mkdtemp(prefix="mcap-bench-cache-")  # the machine's link, kept once
atexit.register(shutil.rmtree, _KEPT, True)


def one_off_measure(mode: str, link_kept: bool = True) -> float:
    """Seconds of a one-off ``measure`` in a fresh store; ``link_kept``: the machine's link
    and co-run factors already measured (the usual case), else an empty cache (a machine
    seen first)."""
    with tempfile.TemporaryDirectory(prefix="mcap-bench-") as tmp:
        env = _env(mode)
        env["MCAP_CACHE_DIR"] = _KEPT if link_kept else os.path.join(tmp, "cache")
        if link_kept:
            _keep_link()
        return wall([sys.executable, "-m", "mcap", "measure", "--model", MODEL, "--balance",
                     BALANCE, "--store", os.path.join(tmp, "store.db")], env)


def _keep_link() -> None:
    """One untimed ``measure`` into the bench's own cache: the machine's link and co-run
    factors (``mcap.runner.machinecache``) are kept from then on."""
    global _warm
    if _warm:
        return
    with tempfile.TemporaryDirectory(prefix="mcap-bench-") as tmp:
        env = _env("fork")
        env["MCAP_CACHE_DIR"] = _KEPT
        wall([sys.executable, "-m", "mcap", "measure", "--model", MODEL, "--balance", BALANCE,
              "--store", os.path.join(tmp, "store.db")], env)
    _warm = True


_warm = False


def restart_after_oom(mode: str) -> tuple[float, float]:
    """(seconds the OOM run took, seconds until the restarted pool is ready)."""
    from mcap.core.types import Setup
    from mcap.runner import open_runner

    if mode == "spawn":
        os.environ["MCAP_STAGE_START"] = "spawn"
    else:
        os.environ.pop("MCAP_STAGE_START", None)
    setup = Setup(stages=4, batch_size=32, capacity_bytes=150 * 2**20)
    with open_runner(MODEL, setup, timeout=300) as runner:
        runner.model_info  # ready
        start = time.perf_counter()
        run = runner.measure(tuple(int(n) for n in BALANCE.split(",")))
        oom_seconds = time.perf_counter() - start
        if run.status != "oom":
            raise SystemExit(f"expected an oom run, got {run.status}: {run.error}")
        start = time.perf_counter()
        why = runner._pool.wait_ready(time.monotonic() + 300)
        ready_seconds = time.perf_counter() - start
        if why:
            raise SystemExit(f"the restarted pool did not get ready: {why}")
    os.environ.pop("MCAP_STAGE_START", None)
    return oom_seconds, ready_seconds


def figures(quick: bool = False) -> list:
    """bench/run.py's rows (module docstring)."""
    from benchtable import Figure
    n = 1 if quick else 5
    runs = "one run" if n == 1 else f"median of {n}"
    imp = statistics.median(wall([sys.executable, "-c", "import torch"], _env("fork"))
                            for _ in range(n))
    one = statistics.median(one_off_measure("fork") for _ in range(n))
    first = one_off_measure("fork", link_kept=False)
    pairs = [restart_after_oom("fork") for _ in range(n)]
    oom, ready = (statistics.median(p[i] for p in pairs) for i in (0, 1))
    return [Figure(f"one-off `python -m mcap measure --model {MODEL} --balance {BALANCE}`, "
                   "fresh store (fork: the default on CPU)",
                   f"{one:.2f} s = {one / imp:.2f} x import torch ({imp:.2f} s), so the target "
                   f"is {2.5 * imp + 1:.2f} s here ({runs}), the machine's link and co-run "
                   f"factors kept; on a machine seen first (link "
                   f"and co-run factors measured too) {first:.2f} s (one run)",
                   "<= 2.5 x import torch + 1 s (issue 42 item 6)", timing=True),
            Figure("stage processes ready again after an out-of-memory run (fork)",
                   f"{ready:.2f} s after the OOM run returned in {oom:.2f} s ({runs})",
                   "none set",
                   timing=True)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--modes", default="fork,spawn", help="start modes to compare")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    ap.add_argument("--quick", action="store_true", help="with --figures: one run each")
    args = ap.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    modes = [m for m in args.modes.split(",") if m]

    imports = [wall([sys.executable, "-c", "import torch"], _env("fork"))
               for _ in range(args.repeats)]
    imp = statistics.median(imports)
    print(f"python -c 'import torch': median {imp:.2f} s  ({', '.join(f'{t:.2f}' for t in imports)})")
    print(f"target for a one-off measure: 2.5 x {imp:.2f} + 1 = {2.5 * imp + 1:.2f} s")
    for mode in modes:
        times = [one_off_measure(mode) for _ in range(args.repeats)]
        med = statistics.median(times)
        print(f"one-off measure ({mode}, link and co-run kept): median {med:.2f} s = "
              f"{med / imp:.2f} x import  ({', '.join(f'{t:.2f}' for t in times)})")
        first = one_off_measure(mode, link_kept=False)
        print(f"one-off measure ({mode}, a machine seen first: link and co-run measured): "
              f"{first:.2f} s")
    for mode in modes:
        pairs = [restart_after_oom(mode) for _ in range(args.repeats)]
        oom = statistics.median(p[0] for p in pairs)
        ready = statistics.median(p[1] for p in pairs)
        print(f"restart after an OOM ({mode}): the OOM run returned in {oom:.2f} s, the new "
              f"pool was ready {ready:.2f} s later (medians; "
              f"{', '.join(f'{a:.2f}+{b:.2f}' for a, b in pairs)})")
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
