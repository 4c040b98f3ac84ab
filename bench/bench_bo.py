"""mCAP-BO quality and time, tuned vs the paper's settings (issue 13, item 6).

    python bench/bench_bo.py                       # both settings, default cases (~40 min: paper dominates)
    python bench/bench_bo.py --settings tuned      # tuned only (~2 min)
    python bench/bench_bo.py --cases syn36:4,vgg:8 --seeds 5

For each case and setting: the predicted peak of bo's pick over exact's optimum (median and
max over seeds 0..N-1), where in the 75 evaluations the best was first reached, the median
wall time, and a digest of every evaluated partitioning in order (compare digests across
machines: equal digests mean the same picks).

Tables: ``vgg`` = data/vgg11-cpu4.profile.json (L=30, bundled CPU profile), ``vgg512`` =
data/vgg11-h512-b8-cpu4.profile.json (L=30), ``synL`` / ``synLsK`` = bench_search's random
table of L layers (table seed K, default 0; mem_isolated uniform in [1e8, 1e9), mem_added in
[-1e8, 5e8)) -- ``syn36`` is the issue's L=36 case. The tuned settings were designed on
vgg and syn36 at G=4; vgg512, syn36s1, syn36s2 and every G=8 case were checks it never saw.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import hashlib
import statistics
import time

from bench_search import stats as synthetic
from mcap.core.predict import CostTable, cost_table
from mcap.core.search import bayes, exact
from mcap.io.jsonio import load_profile

DATA = Path(__file__).resolve().parents[1] / "data"
PROFILES = {"vgg": "vgg11-cpu4.profile.json", "vgg512": "vgg11-h512-b8-cpu4.profile.json"}


def table(name: str) -> CostTable:
    if name in PROFILES:
        return cost_table(load_profile(str(DATA / PROFILES[name])).stats)
    if not name.startswith("syn"):
        raise SystemExit(f"unknown table {name!r}: vgg, vgg512, synL or synLsK")
    L, _, seed = name[3:].partition("s")
    return cost_table(synthetic(int(L), int(seed or 0)))


def run(t: CostTable, G: int, settings: str, seed: int):
    log: list[tuple[int, int]] = []

    class Logged(CostTable):  # records every stage cost asked for, in order: the picks
        def stage(self, first: int, last: int) -> int:
            log.append((first, last))
            return CostTable.stage(self, first, last)

    t0 = time.perf_counter()
    bal, n, curve = bayes.solve(Logged(t.iso, t.prefix), G, seed=seed, settings=settings)
    dt = time.perf_counter() - t0
    return bal, n, curve, dt, hashlib.sha256(repr(log).encode()).hexdigest()[:12]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="syn36:4,vgg:4,vgg512:4,syn36s1:4,syn36:8")
    ap.add_argument("--settings", default="tuned,paper")
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    for case in args.cases.split(","):
        name, G = case.split(":")
        G = int(G)
        t = table(name)
        opt = exact.minmax(t, G)
        for settings in args.settings.split(","):
            ratios, found, times, digests = [], [], [], []
            for seed in range(args.seeds):
                bal, n, curve, dt, digest = run(t, G, settings, seed)
                assert n <= bayes.ITERATIONS
                ratios.append(curve[-1] / opt)
                found.append(curve.index(curve[-1]) + 1)
                times.append(dt)
                digests.append(digest)
            print(f"bo {settings:<6} {name:<8} L={t.num_layers} G={G}: peak/optimum median "
                  f"{statistics.median(ratios):.3f} max {max(ratios):.3f} over {args.seeds} seeds "
                  f"({', '.join(f'{r:.3f}' for r in ratios)}); best reached at evaluation "
                  f"median {statistics.median(found):.0f}; median {statistics.median(times):.2f} s; "
                  f"picks digest {hashlib.sha256(''.join(digests).encode()).hexdigest()[:12]}",
                  flush=True)


if __name__ == "__main__":
    main()
