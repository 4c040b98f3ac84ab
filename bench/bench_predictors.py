"""Every registered predictor on every (profile, sweep) pair: the issue-11 table.

    python bench/bench_predictors.py                       # bundled data/ pairs + ../shared/gpu-h100, gpu-h200
    python bench/bench_predictors.py --pair P.json S.json  # one pair
    python bench/bench_predictors.py --markdown            # as a markdown table, for bench/log/
    python bench/bench_predictors.py --boundaries-from-spec  # as if every profile recorded
                                                             # what its stages exchange
    python bench/bench_predictors.py --figures             # bench/run.py's rows: the default
                                                           # predictor on every pair in data/

For each pair and predictor: |predicted - measured| / measured of the overall peak (the
partitioning's fullest device) and of every stage, p50 / p90 / max (one percentile
definition: ``mcap.core.evaluate.percentile``), and where exact's pick under that predictor
lands among the measured partitionings (rank by measured peak, 1 = lowest; ratio to the
lowest). A pick a sampled sweep did not measure is composed from the sweep's stages when
every one of its stages (first layer, last layer, position: ``mcap.core.profiling.cover``) was
measured in some run, marked ``~`` (the highest reading of each stage: on a GPU a stage
reads a few percent apart run to run), else reported as not measured. "in-sample pick":
the measured peak of the partitioning the predictor ranks lowest *among those measured*,
over the lowest measured (what the predictor would have picked from this sample).
Pure: nothing is measured.

``--boundaries-from-spec``: a profile whose runs do not record the bytes a stage receives
and sends (files written before the alone runner; ``workspace.boundary_bytes``) gets them
computed from its model spec on the meta device, as the runner computes them (one
micro-batch's output per layer), and attached to its ok runs: what the ``workspace``
predictor's step would do on those profiles had they recorded them
(bench/log/2026-11-26-h200-predictor-error.md). Rows of such profiles are marked "+ boundaries
from spec". Needs torch.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from collections import defaultdict  # noqa: E402

from mcap.core import predictors  # noqa: E402
from mcap.core.profiling.cover import stage_keys  # noqa: E402
from mcap.core.evaluate import percentile, place  # noqa: E402
from mcap.core.recommend import costs_of, recommend  # noqa: E402
from mcap.core.search.tiebreak import key  # noqa: E402
from mcap.core.setup import mismatch  # noqa: E402
from mcap.io import jsonio  # noqa: E402


def pairs_found(folders=None) -> list[tuple[Path, Path]]:
    out, seen = [], set()
    shared = ROOT.parent / "shared"
    for folder in folders or (ROOT / "data", shared / "gpu-h100", shared / "gpu-h200"):
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


def composed(balance, sweep):
    """(peak, rank, ratio) of ``balance`` composed from the highest reading of each of its
    stages in ``sweep``'s ok runs, or None when one of its stages was never measured."""
    seen = defaultdict(int)
    ok = [r for r in sweep.runs if r.status == "ok" and r.peaks]
    for r in ok:
        for k, p in zip(stage_keys(r.balance, sweep.setup.schedule), r.peaks):
            seen[k] = max(seen[k], int(p))
    keys = stage_keys(balance, sweep.setup.schedule)
    if not all(k in seen for k in keys):
        return None
    peak = max(seen[k] for k in keys)
    best = min(max(r.peaks) for r in ok)
    return peak, 1 + sum(1 for r in ok if max(r.peaks) < peak), peak / best


def pick_cells(costs, stages: int, sweep) -> tuple[str, str, str]:
    """(pick, rank, ratio) cells of exact's pick under ``costs`` (module docstring)."""
    pick = recommend(costs, stages, "exact")
    where = place("exact", pick.balance, pick.predicted_peak, sweep.runs)
    text = "-".join(map(str, pick.balance))
    if where.rank is not None:
        return text, f"{where.rank}", f"{where.ratio:.3f}x"
    built = composed(pick.balance, sweep) if where.note == "not measured" else None
    if built is None:
        return text, "-", where.note or "-"
    return text, f"~{built[1]}", f"~{built[2]:.3f}x"


def in_sample(pred: np.ndarray, bals: np.ndarray, meas_overall: np.ndarray) -> float:
    """The measured peak of the sample's partitioning the predictor ranks first (every
    method's tie-break, ``mcap.core.search.tiebreak``) over the sample's lowest."""
    first = min(range(len(bals)), key=lambda i: key(pred[i], bals[i]))
    return float(meas_overall[first] / meas_overall.min())


def with_spec_boundaries(profile):
    """``profile`` with every ok run's stages given the boundary bytes its model spec
    implies (module docstring), or None when it records them already or the spec cannot be
    built here."""
    import dataclasses

    from mcap.core.predictors.workspace import boundary_bytes
    from mcap.core.profiling.stats import stage_windows
    from mcap.core.types import StageTimes
    if boundary_bytes(profile) is not None:
        return None
    try:
        from mcap.models import build_model
        from mcap.runner.pipelining import _nbytes, tensor_shapes
        built = build_model(profile.model.spec, device="meta")
        micro = max(1, profile.setup.batch_size // profile.setup.chunks)
        inputs, _ = built.example_batch(micro)
        out = [_nbytes(m) for m in tensor_shapes(built.module, inputs[:micro])[:-1]]
    except Exception as exc:  # noqa: BLE001 (a user model, a missing package: say so, go on)
        print(f"  ({profile.model.spec}: no boundaries from the spec: {exc})", file=sys.stderr)
        return None
    n = len(out)
    if n != len(profile.model.layers):
        return None

    def times(run):
        return tuple(StageTimes(((0.0,),), ((0.0,),), (0.0,), out[a - 1] if a else 0,
                                out[z] if z < n - 1 else 0) for a, z in stage_windows(run.balance))

    return dataclasses.replace(profile, runs=tuple(
        dataclasses.replace(r, times=times(r)) if r.status == "ok" and r.times is None else r
        for r in profile.runs))


def row(profile, sweep, name: str) -> dict:
    costs = costs_of(profile, name)
    return errors_row(costs, sweep, name)


def errors_row(costs, sweep, name: str) -> dict:
    ok = [r for r in sweep.runs if r.status == "ok" and r.peaks]
    bals = np.asarray([r.balance for r in ok], dtype=np.int64)
    pred = costs.peaks_many(bals)
    meas = np.asarray([r.peaks for r in ok], dtype=np.int64)
    overall = np.abs(pred.max(axis=1) - meas.max(axis=1)) / meas.max(axis=1)
    stage = (np.abs(pred - meas) / meas).ravel()
    pick, rank, ratio = pick_cells(costs, sweep.setup.stages, sweep)
    return {"predictor": name, "n": len(ok),
            "p50": percentile(overall, 50), "p90": percentile(overall, 90), "max": overall.max(),
            "s50": percentile(stage, 50), "s90": percentile(stage, 90), "smax": stage.max(),
            "pick": pick, "rank": rank, "ratio": ratio,
            "sample": in_sample(pred, bals, meas.max(axis=1)), "details": costs.details}


TARGET = "overall p90 <= 2%, per stage p90 <= 5%, pick <= 1.02x (issues 11, 30)"


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: the default predictor on every (profile, sweep) pair bundled in
    data/ (not ../shared, so that every checkout gives the same rows). Pure: ``quick``
    changes nothing."""
    from benchtable import Figure
    out = []
    for p, s in pairs_found((ROOT / "data",)):
        r = row(jsonio.load_profile(p), jsonio.load_sweep(s), predictors.DEFAULT)
        rank = f"rank {r['rank']}, {r['ratio']}" if r["rank"] != "-" else r["ratio"]
        out.append(Figure(
            f"predictor error, {p.name.removesuffix('.profile.json')} x "
            f"{s.name.removesuffix('.sweep.json')}",
            f"{r['predictor']}, n={r['n']}: overall p50 {r['p50']:.2%}, p90 {r['p90']:.2%}, max "
            f"{r['max']:.2%}; per stage p90 {r['s90']:.2%}; exact's pick {r['pick']} {rank}",
            TARGET))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pair", nargs=2, action="append", metavar=("PROFILE", "SWEEP"))
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    ap.add_argument("--quick", action="store_true", help="with --figures: the same (pure)")
    ap.add_argument("--boundaries-from-spec", action="store_true",
                    help="give profiles that do not record them their stages' boundary "
                         "bytes from the model spec (module docstring)")
    args = ap.parse_args(argv)
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return 0
    pairs = [(Path(p), Path(s)) for p, s in args.pair] if args.pair else pairs_found()
    if args.markdown:
        print("| profile | sweep | predictor | n | overall p50 | p90 | max | per stage p50 | p90 | max "
              "| exact's pick | rank | ratio | in-sample pick |")
        print("|" + "---|" * 14)
    for p, s in pairs:
        profile, sweep = jsonio.load_profile(p), jsonio.load_sweep(s)
        label = p.name
        if args.boundaries_from_spec:
            filled = with_spec_boundaries(profile)
            if filled is not None:
                profile, label = filled, f"{p.name} + boundaries from spec"
        if not args.markdown:
            print(f"\n{label} + {s.name}")
        for name in predictors.names():
            r = row(profile, sweep, name)
            if args.markdown:
                print(f"| {label} | {s.name} | {name} | {r['n']} | {r['p50']:.2%} | {r['p90']:.2%} "
                      f"| {r['max']:.2%} | {r['s50']:.2%} | {r['s90']:.2%} | {r['smax']:.2%} "
                      f"| {r['pick']} | {r['rank']} | {r['ratio']} | {r['sample']:.3f}x |")
            else:
                print(f"  {name:<9} n={r['n']:<5} overall p50 {r['p50']:.2%} p90 {r['p90']:.2%} "
                      f"max {r['max']:.2%} | stage p50 {r['s50']:.2%} p90 {r['s90']:.2%} "
                      f"max {r['smax']:.2%} | pick {r['pick']} rank {r['rank']} {r['ratio']} "
                      f"in-sample {r['sample']:.3f}x  {r['details']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
