"""Search time per method (issue 3 targets) on random statistics in bytes.

    python bench/bench_search.py            # all figures (~1-2 minutes; bo dominates)
    python bench/bench_search.py --quick    # skip bo (bench/bench_bo.py has bo's quality)
    python bench/bench_search.py --figures [--quick]   # bench/run.py's rows (--quick: fewer repeats)

Statistics: mem_isolated uniform in [1e8, 1e9) bytes, mem_added uniform in [-1e8, 5e8)
(negative values included), seeded. Each figure is the median of several runs.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import argparse
import statistics
import time

import numpy as np

from mcap.core.search import recommend
from mcap.core.types import LayerStats


def stats(L: int, seed: int = 0) -> LayerStats:
    rng = np.random.default_rng(seed)
    return LayerStats(tuple(int(x) for x in rng.integers(10**8, 10**9, L)),
                      (None,) + tuple(int(x) for x in rng.integers(-10**8, 5 * 10**8, L - 1)))


def timed(fn, repeat, spread=False):
    out, ts = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        ts.append(time.perf_counter() - t)
    return (out, statistics.median(ts), min(ts), max(ts)) if spread else (out, statistics.median(ts))


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: exact's time on the issue-3 and issue-13 cases and brute force's
    rate (medians; ``quick``: fewer repeats), each after one warm-up run."""
    from benchtable import Figure
    out = []
    for L, G, rep, target in ((36, 4, 20, "< 10 ms (issue 3)"),
                              (1000, 64, 5 if quick else 9, "< 0.5 s (issue 13; issue 3: < 1 s)")):
        s = stats(L)
        recommend(s, G, "exact")
        _, dt, lo, hi = timed(lambda: recommend(s, G, "exact"), rep, spread=True)
        out.append(Figure(f"exact search time, L={L} G={G} (random table, seed 0)",
                          f"{dt * 1000:.2f} ms (median of {rep}; min {lo * 1000:.2f}, max "
                          f"{hi * 1000:.2f})", target, timing=True))
    L, G, rep = 100, 5, 1 if quick else 3
    s = stats(L)
    rec, dt = timed(lambda: recommend(s, G, "bf"), rep)
    same = rec.balance == recommend(s, G, "exact").balance
    out.append(Figure(f"brute-force search rate, L={L} G={G} (random table, seed 0)",
                      f"{rec.evaluated / dt / 1e6:.1f} M partitionings/s ({rec.evaluated:,} in "
                      f"{dt:.3f} s, median of {rep}); same pick as exact: {'yes' if same else 'NO'}",
                      ">= 10 M/s (issue 3)", timing=True))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    args = ap.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    # The issue-13 target is the L=1000 G=64 median (under 0.5 s); a warm-up run first.
    for L, G, rep in [(30, 4, 20), (36, 4, 20), (200, 16, 7), (1000, 64, 9)]:
        s = stats(L)
        recommend(s, G, "exact")
        rec, dt, lo, hi = timed(lambda: recommend(s, G, "exact"), rep, spread=True)
        print(f"exact  L={L:<5} G={G:<3} median {dt * 1000:9.2f} ms over {rep} runs "
              f"(min {lo * 1000:.2f}, max {hi * 1000:.2f})  peak {rec.predicted_peak}")
    for L, G in [(36, 4), (100, 5), (300, 4), (60, 7)]:
        s = stats(L)
        rec, dt = timed(lambda: recommend(s, G, "bf"), 3)
        ex = recommend(s, G, "exact")
        print(f"bf     L={L:<5} G={G:<3} {rec.evaluated:>11,} partitionings, median {dt:7.3f} s = "
              f"{rec.evaluated / dt / 1e6:6.1f} M/s; same as exact: {rec.balance == ex.balance}")
    if args.quick:
        return
    for L, G in [(30, 4), (36, 4)]:
        s = stats(L)
        opt = recommend(s, G, "exact").predicted_peak
        ts, ratios = [], []
        for seed in range(3):
            rec, dt = timed(lambda: recommend(s, G, "bo", seed=seed), 1)
            ts.append(dt)
            ratios.append(rec.predicted_peak / opt)
        print(f"bo     L={L:<5} G={G:<3} 75 iterations, median {statistics.median(ts):6.2f} s over 3 seeds; "
              f"best peak / optimum: {', '.join(f'{r:.3f}' for r in ratios)}")


if __name__ == "__main__":
    main()
