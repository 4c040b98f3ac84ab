"""Results-store figures: write and read rates, and what opening (with its integrity
check) costs as the store grows. Prints medians; BENCHMARKS.md records one run.

    python -m bench.bench_store [--runs 100000]
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import tempfile
import time
from pathlib import Path

from mcap.store import Store
from mcap.core.types import Layer, ModelInfo, Run, Setup, Sweep

MODEL = ModelInfo("vgg11:image_size=32", tuple(Layer(f"layers.{i}", 4096 * i) for i in range(30)))
SETUP = Setup(stages=4)


def balances(layers: int = 30, stages: int = 4):
    """Every partitioning of ``layers`` into ``stages`` non-empty stages, in order."""
    for cuts in itertools.combinations(range(1, layers), stages - 1):
        bounds = (0, *cuts, layers)
        yield tuple(b - a for a, b in zip(bounds, bounds[1:]))


def run_of(balance, k: int) -> Run:
    peaks = tuple(100_000_000 + 1_000_003 * n + k for n in balance)
    return Run(balance, "ok", peaks, 0.5 + k * 1e-6, 64.0)


def size_mb(path: Path) -> float:
    """The store's size: the file plus its WAL, where recent writes sit until checkpointed."""
    wal = Path(f"{path}-wal")
    return (path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)) / 1e6


def median_time(fn, repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000, help="size of the large store")
    args = parser.parse_args()
    space = list(balances())  # 3,654 partitionings: VGG11 (30 layers) on 4 devices
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        with Store(path) as store:
            study = store.study(MODEL, SETUP)
            n = 1000
            t = time.perf_counter()
            for k in range(n):
                store.record_run(study, run_of(space[k], k))
            per_run = (time.perf_counter() - t) / n
            print(f"record_run, one transaction each: {per_run * 1e3:.3f} ms/run "
                  f"({1 / per_run:,.0f} runs/s)")

            sweep = Sweep(MODEL, SETUP, tuple(run_of(b, 7) for b in space))
            t = time.perf_counter()
            sid = store.save_sweep(sweep)
            print(f"save_sweep of {len(space):,} runs (one transaction): "
                  f"{time.perf_counter() - t:.3f} s")
            t_load = median_time(lambda: store.load_sweep(sid))
            print(f"load_sweep of {len(space):,} runs: median {t_load * 1e3:.1f} ms")
            t_open = median_time(lambda: Store(path).close())
            print(f"open (header checks + quick_check) at {len(space) + n:,} runs, "
                  f"{size_mb(path):.1f} MB: median {t_open * 1e3:.1f} ms")

            # Grow to the large size in big transactions, then time lookups and open.
            extra = args.runs - len(space) - n
            for start in range(0, extra, len(space)):
                chunk = min(len(space), extra - start)
                store.save_sweep(Sweep(MODEL, SETUP, tuple(run_of(b, start + 100 + i)
                                                           for i, b in enumerate(space[:chunk]))))
            probe = space[::97]
            t_find = median_time(lambda: [store.find_run(study, b) for b in probe]) / len(probe)
            print(f"find_run at {args.runs:,} runs: median {t_find * 1e6:.0f} us per lookup")
            t_runs = median_time(lambda: store.runs(study), repeat=3)
            print(f"runs(study) of {args.runs:,} runs: median {t_runs:.2f} s")
        t_open = median_time(lambda: Store(path).close(), repeat=3)
        print(f"open at {args.runs:,} runs, {size_mb(path):.1f} MB: "
              f"median {t_open * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
