"""mCAP-BO quality and time, tuned vs the paper's settings (issue 13, item 6).

    python bench/bench_bo.py                       # both settings, default cases (~40 min: paper dominates)
    python bench/bench_bo.py --settings tuned      # tuned only (~2 min)
    python bench/bench_bo.py --cases syn36:4,vgg:8 --seeds 5
    python bench/bench_bo.py --figures [--quick]   # bench/run.py's rows: tuned settings only

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


def case_figures(case: str, seeds: int, settings: str = "tuned") -> tuple[dict, list[float]]:
    """One case's figures over seeds 0..seeds-1 (what main prints) and the run times."""
    name, G = case.split(":")
    G = int(G)
    t = table(name)
    opt = exact.minmax(t, G)
    ratios, found, times, digests = [], [], [], []
    for seed in range(seeds):
        bal, n, curve, dt, digest = run(t, G, settings, seed)
        assert n <= bayes.ITERATIONS
        ratios.append(curve[-1] / opt)
        found.append(curve.index(curve[-1]) + 1)
        times.append(dt)
        digests.append(digest)
    return {"name": name, "L": t.num_layers, "G": G, "ratios": ratios, "found": found,
            "digest": hashlib.sha256("".join(digests).encode()).hexdigest()[:12]}, times


QUICK_CASES, FULL_CASES = "syn36:4,vgg:4", "syn36:4,vgg:4,vgg512:4,syn36s1:4,syn36:8"


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: bo with its tuned (default) settings, the pick's predicted peak
    over exact's optimum per case, and the time of one 75-evaluation run (``quick``: 2 cases
    and 3 seeds; else 5 cases and 10 seeds). The paper's settings (40 min) are left out."""
    from benchtable import Figure
    seeds = 3 if quick else 10
    out, all_times = [], []
    for case in (QUICK_CASES if quick else FULL_CASES).split(","):
        c, times = case_figures(case, seeds)
        all_times += times
        out.append(Figure(
            f"bo (tuned settings), {c['name']} L={c['L']} G={c['G']}: pick's peak / exact's optimum",
            f"median {statistics.median(c['ratios']):.3f}x, max {max(c['ratios']):.3f}x over "
            f"{seeds} seeds; best reached at evaluation {statistics.median(c['found']):.0f} "
            f"(median); picks digest {c['digest']}", "median <= 1.02x (issue 13 item 6)"))
    out.append(Figure("bo run time, 75 evaluations (tuned settings)",
                      f"{statistics.median(all_times):.2f} s (median of {len(all_times)} runs: "
                      f"{len(all_times) // seeds} cases x {seeds} seeds)", "< 30 s (issue 3)",
                      timing=True))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    ap.add_argument("--quick", action="store_true", help="with --figures: 2 cases, 3 seeds")
    ap.add_argument("--cases", default="syn36:4,vgg:4,vgg512:4,syn36s1:4,syn36:8")
    ap.add_argument("--settings", default="tuned,paper")
    ap.add_argument("--seeds", type=int, default=10)
    args = ap.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    for case in args.cases.split(","):
        for settings in args.settings.split(","):
            c, times = case_figures(case, args.seeds, settings)
            ratios, found = c["ratios"], c["found"]
            print(f"bo {settings:<6} {c['name']:<8} L={c['L']} G={c['G']}: peak/optimum median "
                  f"{statistics.median(ratios):.3f} max {max(ratios):.3f} over {args.seeds} seeds "
                  f"({', '.join(f'{r:.3f}' for r in ratios)}); best reached at evaluation "
                  f"median {statistics.median(found):.0f}; median {statistics.median(times):.2f} s; "
                  f"picks digest {c['digest']}", flush=True)

if __name__ == "__main__":
    main()
