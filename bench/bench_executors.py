"""Executors side by side (issue 42): measurements per second against workers, and Ray's
overhead per task.

    python bench/bench_executors.py throughput [--workers 1,2,4] [--executors local,ray]
    python bench/bench_executors.py overhead [--tasks 12]

``throughput``: one sweep of ``--model`` (default VGG11, 4 stages, a seeded sample of 8
partitionings: its distinct stage keys, each measured once alone) in a fresh store per
point, with W workers: local ``MCAP_STAGE_SLOTS=W``; ray a local instance of W CPUs
(``--ray-local-cpus W``, one CPU per task). Prints the stages measured, the command's wall
time and stages per second (its whole wall time: start-up included).

``overhead``: the same stage job run ``--tasks`` times (a) each as a fresh local process
(``python -c`` running ``mcap.runner.fresh.measure``: import, build, run) one after the
other, (b) on the local executor (one slot), and (c) as Ray tasks on a local instance of 1
CPU (a CPU task's worker stays and forks a fresh stage process per task from its zygote,
``mcap.runner.executors.warm``); Ray's overhead per task is (c)'s wall per task less
(b)'s (and, as before, less (a)'s). Also the wall per task of a no-op Ray task with
``max_calls=1`` (a worker started, a call, its exit; no torch).

The machine's load changes every figure: the load average is printed with them.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
MODEL, STAGES, SAMPLE = "vgg11:image_size=32", 4, 8


def _env(**extra) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def sweep_point(executor: str, workers: int, model: str, sample: int) -> tuple[int, float]:
    """(stages measured, wall seconds) of one sweep in a fresh store."""
    with tempfile.TemporaryDirectory(prefix="mcap-bench-exec-") as tmp:
        args = [sys.executable, "-m", "mcap", "sweep", "--model", model, "--stages",
                str(STAGES), "--sample", str(sample), "--seed", "0", "--store",
                f"{tmp}/s.db", "--out", f"{tmp}/s.sweep.json", "--executor", executor]
        env = _env()
        if executor == "ray":
            args += ["--ray-local-cpus", str(workers)]
        else:
            env["MCAP_STAGE_SLOTS"] = str(workers)
        start = time.perf_counter()
        out = subprocess.run(args, env=env, capture_output=True, text=True, cwd=tmp)
        wall = time.perf_counter() - start
        if out.returncode != 0:
            raise SystemExit(f"{' '.join(args)} exited {out.returncode}: {out.stderr[-2000:]}")
        measured = int(re.search(r"(\d+) stages measured now", out.stdout).group(1))
        return measured, wall


def throughput(args) -> None:
    print(f"{args.model}, {STAGES} stages, a sample of {args.sample} (seed 0); load "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print("| executor | workers | stages measured | wall s | stages/s |")
    print("|---|---|---|---|---|")
    for executor in args.executors.split(","):
        for w in (int(x) for x in args.workers.split(",")):
            n, wall = sweep_point(executor, w, args.model, args.sample)
            print(f"| {executor} | {w} | {n} | {wall:.1f} | {n / wall:.3f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


_FRESH = ("from mcap.runner import fresh\nfrom mcap.core.types import Setup\n"
          "from mcap.runner.protocol import Job\n"
          "fresh.measure({model!r}, Setup(stages={stages}, batch_size=32, chunks=4), "
          "Job(1, {balance!r}, None, stage=1))\n")


def overhead(args) -> None:
    from mcap.core.types import Setup
    from mcap.runner.machine import process_env
    balance = (14, 11, 2, 3)
    code = _FRESH.format(model=MODEL, stages=STAGES, balance=balance)
    env = _env(**process_env(1))
    start = time.perf_counter()
    for _ in range(args.tasks):
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
    fresh_each = (time.perf_counter() - start) / args.tasks

    from mcap.runner import open_runner
    setup = Setup(stages=STAGES, batch_size=32, chunks=4)
    each, peaks = {}, set()
    for executor in ("local", "ray"):
        os.environ.update({"MCAP_EXECUTOR": executor, "MCAP_RAY_LOCAL_CPUS": "1",
                           "MCAP_STAGE_SLOTS": "1"})
        with open_runner(MODEL, setup) as runner:
            runner.model_info  # the pool (or the instance) and the probe, not timed
            start = time.perf_counter()
            runs = runner.measure_stages([(balance, 1)] * args.tasks)
            each[executor] = (time.perf_counter() - start) / args.tasks
        peaks |= {r.peak for r in runs}
    ray_each = each["ray"]
    noop, reused = _noop_tasks(args.tasks)
    print(f"stage 1 of {balance} of {MODEL}, {args.tasks} times; load {os.getloadavg()[0]:.1f}")
    print(f"- a fresh local process each, one after the other: {fresh_each:.2f} s per task")
    print(f"- the local executor (one slot, its warm stage process): {each['local']:.2f} s "
          "per task")
    print(f"- a Ray task each (1 CPU; a stage process forked for it): {ray_each:.2f} s per "
          f"task; peaks of both executors {sorted(peaks)} "
          f"({'0 spread' if len(peaks) == 1 else 'SPREAD'})")
    print(f"- Ray's overhead per task: {ray_each - each['local']:+.2f} s over the local "
          f"executor, {ray_each - fresh_each:+.2f} s over a fresh local process")
    print(f"- a no-op Ray task (max_calls=1, no torch): {noop:.2f} s per task; with a "
          f"reused worker (Ray's scheduling alone): {reused * 1000:.1f} ms per task")


def _noop_tasks(n: int) -> tuple[float, float]:
    """Wall per task of ``n`` no-op tasks on a local instance of 1 CPU (in a private
    namespace where this machine allows it, as the executor's): with ``max_calls=1`` (a
    fresh worker each), and on a reused worker (Ray's scheduling alone)."""
    code = ("import time, ray\n"
            "ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
            "f = ray.remote(num_cpus=1, max_calls=1)(lambda: 0)\n"
            "g = ray.remote(num_cpus=1)(lambda: 0)\n"
            "ray.get(f.remote()); ray.get(g.remote())\n"
            f"t = time.perf_counter(); ray.get([f.remote() for _ in range({n})])\n"
            f"a = (time.perf_counter() - t) / {n}\n"
            f"t = time.perf_counter(); ray.get([g.remote() for _ in range({10 * n})])\n"
            f"print(a, (time.perf_counter() - t) / {10 * n})\n")
    from mcap.runner.executors.ray import private_namespace
    cmd = [sys.executable, "-c", code]
    with tempfile.TemporaryDirectory(prefix="mcap-bench-ray-") as home:
        if private_namespace():
            cmd = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child",
                   "sh", "-c", f"{sys.executable} -c 'from mcap.runner.executors.raybridge "
                   "import loopback_up; loopback_up()' && exec \"$0\" \"$@\"", *cmd]
        out = subprocess.run(cmd, env=_env(HOME=home, RAY_USAGE_STATS_ENABLED=0),
                             capture_output=True, text=True, check=True)
    a, b = out.stdout.strip().splitlines()[-1].split()
    return float(a), float(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--workers", default="1,2,4")
    t.add_argument("--executors", default="local,ray")
    t.add_argument("--model", default=MODEL)
    t.add_argument("--sample", type=int, default=SAMPLE)
    o = sub.add_parser("overhead")
    o.add_argument("--tasks", type=int, default=12)
    args = ap.parse_args()
    (throughput if args.what == "throughput" else overhead)(args)


if __name__ == "__main__":
    main()
