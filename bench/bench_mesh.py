"""Recommendation time on a mesh (CAPTURE III-C; issue 15 target: under 1 s on 2x4): the
exact DP vs Algorithm 4 with and without its pruning, on the bundled models' sizes.

    python bench/bench_mesh.py                  # 2x4 and 1x4, enumeration capped at 120 s
    python bench/bench_mesh.py --cap 30 --mesh 2x4
    python bench/bench_mesh.py --figures [--quick]  # bench/run.py's rows (--quick: no Algorithm 4)

Stage costs: each bundled profile's own pp statistics under the default predictor. Where a
profile has no dp/tp statistics of its own (every bundled one until ``profile --parallel
dp,tp`` has been run for it), dp/tp statistics are *timing stand-ins*: the pp statistics
scaled by fixed factors (dp2 0.70, dp4 0.55, tp2 0.60, tp4 0.45). They give the search the
right number of configs and plausible ties; they are not predictions and are printed as
"stand-in". Degree 8 and up would come from the degree fit (III-B3; M(k) = R + S/k by default).

Columns: ``fit`` is fitting every config's cost table once (the predictor on each variant),
``search`` the search alone; ``evaluated`` is transitions (DP) or completed plans (Algorithm
4). A search that passes ``--cap`` seconds is stopped (a child process) and shown as "> cap".
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import argparse
import dataclasses
import multiprocessing as mp
import platform
import time

from mcap.core.capture.plan import parse_mesh
from mcap.core.capture.predict import HybridCosts, recommend_mesh, searchable
from mcap.core.types import LayerStats, VariantStats
from mcap.io import datasets

PROFILES = ("gpt-l8-h256-cpu4.profile.json", "amoebanet-d-l6-f64-cpu4.profile.json",
            "vgg11-cpu4.profile.json")
STAND_INS = (("dp", 2, 0.70), ("dp", 4, 0.55), ("tp", 2, 0.60), ("tp", 4, 0.45))


def scaled(s: LayerStats, f: float) -> LayerStats:
    return LayerStats(tuple(int(f * x) for x in s.mem_isolated),
                      (None,) + tuple(int(f * x) for x in s.mem_added[1:]))


def with_variants(name: str):
    profile = datasets.load(datasets.parse_ref(f"bundled:{name}"))
    if any(v.parallel in ("dp", "tp") for v in profile.variants):
        return profile, "profiled"
    b = profile.setup.batch_size
    vs = tuple(VariantStats(b, scaled(profile.stats, f), k, d) for k, d, f in STAND_INS)
    # As if all of it came from engine hybrid: HybridCosts refuses dp/tp beside pp
    # statistics of another engine (a real hybrid profile's pp runs ran on engine hybrid).
    setup = dataclasses.replace(profile.setup, engine="hybrid")
    return dataclasses.replace(profile, variants=tuple(profile.variants) + vs,
                               setup=setup), "stand-in"


def _child(name, mesh, method, prune, q):
    profile, _ = with_variants(name)
    r = recommend_mesh(profile, parse_mesh(mesh), method, prune)
    q.put((r.seconds, r.evaluated, r.plan.text, r.peak))


def search(name, mesh, method, prune, cap):
    """(seconds, evaluated, plan, peak) or None past ``cap`` seconds (in a child process, so
    an exponential enumeration can be stopped)."""
    q = mp.get_context("fork").Queue()
    p = mp.get_context("fork").Process(target=_child, args=(name, mesh, method, prune, q))
    p.start()
    p.join(cap)
    if p.is_alive():
        p.terminate()
        p.join()
        return None
    return q.get()


def fit_seconds(profile, mesh: str) -> float:
    """Fitting every config's cost table of ``mesh`` once (the table's ``fit`` column)."""
    m = parse_mesh(mesh)
    started = time.perf_counter()
    hc = HybridCosts(profile)
    kinds, _ = searchable(hc, m)
    hc.tables(m, kinds)
    return time.perf_counter() - started


REAL = "gpt-l8-h128-cpu8-dptp.profile.json"  # measured dp/tp statistics (data/PROVENANCE.md)


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: fit + exact DP on 2x4 for the bundled profiles (one run each),
    the picks on the bundled dp/tp profile, and (not ``quick``) Algorithm 4 with pruning on
    2x4, capped at 120 s."""
    from benchtable import Figure
    out, totals, pruned = [], [], []
    for name in PROFILES:
        profile, _ = with_variants(name)
        fit = fit_seconds(profile, "2x4")
        s, _, plan, _ = search(name, "2x4", "exact", False, 120.0)
        totals.append((fit + s, fit, s, profile.model.spec.split(":")[0]))
        if not quick:
            got = search(name, "2x4", "enumerate", True, 120.0)
            pruned.append(f"{totals[-1][3]} " + ("> 120 s (stopped)" if got is None else
                                                 f"{got[0]:.3f} s, same plan: "
                                                 f"{'yes' if got[2] == plan else 'NO'}"))
    worst = max(totals)
    out.append(Figure(
        "mesh recommender on 2x4, fit + exact DP: the slowest of the 3 bundled profiles "
        "(stand-in dp/tp statistics)",
        f"{worst[0]:.2f} s ({worst[3]}: fit {worst[1]:.2f} s + search {worst[2]:.3f} s; one run "
        f"each); " + ", ".join(f"{m} {t:.2f} s" for t, _, _, m in totals if m != worst[3]),
        "< 1 s (issue 15)", timing=True))
    real = datasets.load(datasets.parse_ref(f"bundled:{REAL}"))
    picks = [(m, recommend_mesh(real, parse_mesh(m))) for m in ("2x4", "1x8", "1x4")]
    out.append(Figure(f"mesh recommender's picks, {REAL.removesuffix('.profile.json')} "
                      "(measured dp/tp statistics)",
                      "; ".join(f"{m}: {r.plan.text} ({r.peak / 2**20:.2f} MiB)" for m, r in picks)))
    if not quick:
        out.append(Figure("Algorithm 4 with pruning on 2x4 vs the exact DP (stand-in dp/tp "
                          "statistics)", "; ".join(pruned) + " (one run each)",
                          "the same plan (CAPTURE III-C)", timing=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    ap.add_argument("--quick", action="store_true", help="with --figures: the exact DP only")
    ap.add_argument("--mesh", action="append", help="NxK (repeatable; default 2x4 and 1x4)")
    ap.add_argument("--cap", type=float, default=120.0, help="seconds before a search is stopped")
    args = ap.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    meshes = args.mesh or ["2x4", "1x4"]
    print(f"machine: {platform.machine()} {platform.processor() or ''} python "
          f"{platform.python_version()}; date {time.strftime('%Y-%m-%d')}")
    print("| model (profile) | L | dp/tp stats | mesh | fit s | method | search s | evaluated "
          "| plan | peak |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name in PROFILES:
        profile, origin = with_variants(name)
        for mesh in meshes:
            fit = fit_seconds(profile, mesh)
            for method, prune in (("exact", False), ("enumerate", True), ("enumerate", False)):
                got = search(name, mesh, method, prune, args.cap)
                label = method if method == "exact" else \
                    f"Algorithm 4{' pruned' if prune else ', no pruning'}"
                if got is None:
                    row = f"> {args.cap:g} | - | - | -"
                else:
                    s, n, plan, peak = got
                    row = f"{s:.3f} | {n:,} | {plan} | {peak / 2**20:.2f} MiB"
                print(f"| {profile.model.spec.split(':')[0]} ({name}) | {profile.model.num_layers} "
                      f"| {origin} | {mesh} | {fit:.2f} | {label} | {row} |", flush=True)


if __name__ == "__main__":
    main()
