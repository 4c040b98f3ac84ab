"""Results-store figures: write and read rates, and what opening (with its integrity
check) costs as the store grows. Prints medians; BENCHMARKS.md records one run.

    python -m bench.bench_store [--runs 100000]
    python bench/bench_store.py --figures [--quick]   # bench/run.py's rows (--quick: 20,000 runs)
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

from mcap.store import Store  # noqa: E402
from mcap.core.types import Layer, ModelInfo, Run, Setup, Sweep  # noqa: E402

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


def measure(runs: int) -> dict:
    """Every figure, printed as it is taken; returned too (seconds)."""
    space = list(balances())  # 3,654 partitionings: VGG11 (30 layers) on 4 devices
    got = {"space": len(space), "runs": runs}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "store.sqlite"
        with Store(path) as store:
            study = store.study(MODEL, SETUP)
            n = 1000
            t = time.perf_counter()
            for k in range(n):
                store.record_run(study, run_of(space[k], k))
            per_run = got["record_run"] = (time.perf_counter() - t) / n
            print(f"record_run, one transaction each: {per_run * 1e3:.3f} ms/run "
                  f"({1 / per_run:,.0f} runs/s)")

            sweep = Sweep(MODEL, SETUP, tuple(run_of(b, 7) for b in space))
            t = time.perf_counter()
            sid = store.save_sweep(sweep)
            got["save_sweep"] = time.perf_counter() - t
            print(f"save_sweep of {len(space):,} runs (one transaction): "
                  f"{got['save_sweep']:.3f} s")
            t_load = got["load_sweep"] = median_time(lambda: store.load_sweep(sid))
            print(f"load_sweep of {len(space):,} runs: median {t_load * 1e3:.1f} ms")
            t_open = median_time(lambda: Store(path).close())
            print(f"open (header checks + quick_check) at {len(space) + n:,} runs, "
                  f"{size_mb(path):.1f} MB: median {t_open * 1e3:.1f} ms")

            # Grow to the large size in big transactions, then time lookups and open.
            extra = runs - len(space) - n
            for start in range(0, extra, len(space)):
                chunk = min(len(space), extra - start)
                store.save_sweep(Sweep(MODEL, SETUP, tuple(run_of(b, start + 100 + i)
                                                           for i, b in enumerate(space[:chunk]))))
            probe = space[::97]
            t_find = got["find_run"] = median_time(
                lambda: [store.find_run(study, b) for b in probe]) / len(probe)
            print(f"find_run at {runs:,} runs: median {t_find * 1e6:.0f} us per lookup")
            t_runs = got["runs_of_study"] = median_time(lambda: store.runs(study), repeat=3)
            print(f"runs(study) of {runs:,} runs: median {t_runs:.2f} s")
        t_open = got["open_large"] = median_time(lambda: Store(path).close(), repeat=3)
        got["size_mb"] = size_mb(path)
        print(f"open at {runs:,} runs, {size_mb(path):.1f} MB: "
              f"median {t_open * 1e3:.1f} ms")
    return got


def figures(quick: bool = False) -> list:
    """bench/run.py's rows (medians; ``quick``: a store of 20,000 runs, else 100,000)."""
    from benchtable import Figure
    g = measure(20_000 if quick else 100_000)
    none = "none set: negligible next to a profiling run (seconds)"
    return [
        Figure("store: record_run, one transaction per run",
               f"{g['record_run'] * 1e3:.3f} ms/run (mean of 1,000)", none, timing=True),
        Figure(f"store: load_sweep of {g['space']:,} runs", f"{g['load_sweep'] * 1e3:.1f} ms "
               "(median of 5)", none, timing=True),
        Figure("store: find_run in a large store",
               f"{g['find_run'] * 1e6:.0f} us per lookup at {g['runs']:,} runs (median of 5)",
               none, timing=True),
        Figure("store: runs(study) of a large study",
               f"{g['runs_of_study']:.2f} s for {g['runs']:,} runs (median of 3)", none,
               timing=True),
        Figure("store: open with its integrity check, large store",
               f"{g['open_large'] * 1e3:.1f} ms at {g['runs']:,} runs, {g['size_mb']:.1f} MB "
               "(median of 3)", none, timing=True)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000, help="size of the large store")
    parser.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    parser.add_argument("--quick", action="store_true", help="with --figures: 20,000 runs")
    args = parser.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    measure(args.runs)

if __name__ == "__main__":
    main()
