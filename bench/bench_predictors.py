"""Every registered predictor on every (profile, sweep) pair: the issue-11 table.

    python bench/bench_predictors.py                       # bundled data/ pairs + ../shared/gpu-h100, gpu-h200
    python bench/bench_predictors.py --pair P.json S.json  # one pair
    python bench/bench_predictors.py --markdown            # the BENCHMARKS.md table

For each pair and predictor: |predicted - measured| / measured of the overall peak (the
partitioning's fullest device) and of every stage, p50 / p90 / max (one percentile
definition: ``mcap.core.evaluate.percentile``), and where exact's pick under that predictor
lands among the measured partitionings (rank by measured peak, 1 = lowest; ratio to the
lowest). A pick the sweep did not measure is reported as such. Pure: nothing is measured.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcap.core import predictors  # noqa: E402
from mcap.core.evaluate import percentile, place  # noqa: E402
from mcap.core.recommend import costs_of, recommend  # noqa: E402
from mcap.core.setup import mismatch  # noqa: E402
from mcap.io import jsonio  # noqa: E402


def pairs_found() -> list[tuple[Path, Path]]:
    out, seen = [], set()
    shared = ROOT.parent / "shared"
    for folder in (ROOT / "data", shared / "gpu-h100", shared / "gpu-h200"):
        if not folder.is_dir():
            continue
        profiles = sorted(p for p in folder.glob("*.profile.json") if p.name not in seen)
        sweeps = sorted(s for s in folder.glob("*.sweep.json") if s.name not in seen)
        seen |= {p.name for p in profiles} | {s.name for s in sweeps}  # bundled copies win
        for p in profiles:
            prof = jsonio.load_profile(p)
            for s in sweeps:
                if mismatch(prof, jsonio.load_sweep(s)) is None:
                    out.append((p, s))
    return out


def row(profile, sweep, name: str) -> dict:
    costs = costs_of(profile, name)
    ok = [r for r in sweep.runs if r.status == "ok" and r.peaks]
    bals = np.asarray([r.balance for r in ok], dtype=np.int64)
    pred = costs.peaks_many(bals)
    meas = np.asarray([r.peaks for r in ok], dtype=np.int64)
    overall = np.abs(pred.max(axis=1) - meas.max(axis=1)) / meas.max(axis=1)
    stage = (np.abs(pred - meas) / meas).ravel()
    pick = recommend(profile, sweep.setup.stages, "exact", name)
    where = place("exact", pick.balance, pick.predicted_peak, sweep.runs)
    return {"predictor": name, "n": len(ok),
            "p50": percentile(overall, 50), "p90": percentile(overall, 90), "max": overall.max(),
            "s50": percentile(stage, 50), "s90": percentile(stage, 90), "smax": stage.max(),
            "pick": "-".join(map(str, pick.balance)), "rank": where.rank, "ratio": where.ratio,
            "note": where.note, "details": costs.details}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=2, action="append", metavar=("PROFILE", "SWEEP"))
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args(argv)
    pairs = [(Path(p), Path(s)) for p, s in args.pair] if args.pair else pairs_found()
    if args.markdown:
        print("| profile | sweep | predictor | n | overall p50 | p90 | max | per stage p50 | p90 | max "
              "| exact's pick | rank | ratio |")
        print("|" + "---|" * 13)
    for p, s in pairs:
        profile, sweep = jsonio.load_profile(p), jsonio.load_sweep(s)
        if not args.markdown:
            print(f"\n{p.name} + {s.name}")
        for name in predictors.names():
            r = row(profile, sweep, name)
            rank = "-" if r["rank"] is None else f"{r['rank']}"
            ratio = r["note"] or "-" if r["ratio"] is None else f"{r['ratio']:.3f}x"
            if args.markdown:
                print(f"| {p.name} | {s.name} | {name} | {r['n']} | {r['p50']:.2%} | {r['p90']:.2%} "
                      f"| {r['max']:.2%} | {r['s50']:.2%} | {r['s90']:.2%} | {r['smax']:.2%} "
                      f"| {r['pick']} | {rank} | {ratio} |")
            else:
                print(f"  {name:<9} n={r['n']:<5} overall p50 {r['p50']:.2%} p90 {r['p90']:.2%} "
                      f"max {r['max']:.2%} | stage p50 {r['s50']:.2%} p90 {r['s90']:.2%} "
                      f"max {r['smax']:.2%} | pick {r['pick']} rank {rank} {ratio}  {r['details']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
