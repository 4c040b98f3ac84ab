"""Per-run overhead of the runner's persistent stage processes (issue 4, start-up cost).

Archived (issue 27): issue 4's start-up check (bench/log/2026-11-22-runner-overhead.md), kept
for the record; bench/bench_measure_startup.py times start-up now. Runs as is.

    python bench/archive/bench_runner_overhead.py [--model SPEC] [--stages G] [--runs N]

For each run: wall = ``Run.seconds`` (job sent to the stage processes until every stage
answered: build the stage, train 2 iterations, reply), train = the slowest stage's
2-iteration window (``2 * batch / Run.samples_per_second``), overhead = wall - train. It
also prints the one-time start (processes ready: python + torch import + model build) and
what a run after a killed stage costs (the pool restarts in the background).
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcap.runner import open_runner  # noqa: E402
from mcap.core.types import Setup  # noqa: E402


def random_balance(rng: random.Random, layers: int, stages: int) -> tuple[int, ...]:
    cuts = sorted(rng.sample(range(1, layers), stages - 1))
    edges = [0] + cuts + [layers]
    return tuple(b - a for a, b in zip(edges, edges[1:]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="vgg11:image_size=32,hidden=64")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    setup = Setup(stages=args.stages, batch_size=args.batch_size, chunks=args.chunks)
    rng = random.Random(0)
    t0 = time.monotonic()
    with open_runner(args.model, setup, timeout=300) as runner:
        layers = runner.model_info.num_layers
        start = time.monotonic() - t0
        first = runner.measure(random_balance(rng, layers, args.stages))
        walls, trains = [], []
        for _ in range(args.runs):
            run = runner.measure(random_balance(rng, layers, args.stages))
            assert run.status == "ok", run.error
            walls.append(run.seconds)
            trains.append(2 * args.batch_size / run.samples_per_second)
        os.kill(runner.worker_pids[-1], signal.SIGKILL)
        failed = runner.measure(random_balance(rng, layers, args.stages))
        t1 = time.monotonic()
        after = runner.measure(random_balance(rng, layers, args.stages))
        recovery = time.monotonic() - t1
    overheads = [w - t for w, t in zip(walls, trains)]
    med = statistics.median
    print(f"model {args.model}, {args.stages} stage processes, batch {args.batch_size}, "
          f"chunks {args.chunks}, {args.runs} runs after one warm-up")
    print(f"start (processes ready, once): {start:.2f} s; first run {first.seconds:.2f} s")
    print(f"per run: wall median {med(walls):.3f} s, train median {med(trains):.3f} s, "
          f"overhead median {med(overheads):.3f} s (min {min(overheads):.3f}, "
          f"max {max(overheads):.3f})")
    print(f"killed stage -> {failed.status} in {failed.seconds:.2f} s; next run "
          f"{after.status} after {recovery:.2f} s (includes the pool restart)")


if __name__ == "__main__":
    main()
