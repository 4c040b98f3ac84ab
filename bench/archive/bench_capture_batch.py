"""CAPTURE's batch-size scaling and layer merger against measured sweeps (issue 15, item 9).

Archived (issue 27): the one-off behind bench/log/2026-11-23-capture-batch-scaling.md
(issue 15 item 9), kept for the record. Runs as is on the files it names.

    # batch-size scaling (III-A2/B2): a profile at B/4 and B/2 (profile --capture) and one
    # profiled at B, both against a sweep measured at B
    python bench/archive/bench_capture_batch.py batch CAPTURE.profile.json DIRECT.profile.json SWEEP.json
    python bench/archive/bench_capture_batch.py batch CAPTURE.profile.json DIRECT.profile.json -

    # the layer merger (III-A3): merged profiles against the full sweep of the real layers
    python bench/archive/bench_capture_batch.py merge FULL.profile.json SWEEP.json Lm [MERGED.profile.json ...]

``batch`` prints, per predictor, the p50/p90/max error of every ok partitioning's predicted
peak (the batch-scaled profile's at B, and the one profiled at B) and exact's pick: its
measured peak and its ratio to the best measured; with ``-`` for the sweep, the batch line's
error on the direct profile's own runs (measured at B), per peak and per stage. ``merge`` merges FULL (``--merge-to``'s
rule, ``mcap.core.capture.merging``) to each Lm and prints the same figures over the sweep's
partitionings whose stage boundaries fall between merged layers (the only ones a merged
profile can place), plus the profiling runs and their measured seconds after merging; a
MERGED profile given (written by ``profile --merge-to``) is scored the same way, with the
seconds its own runs took.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcap.core.capture import batchscale  # noqa: E402
from mcap.core.capture import merging  # noqa: E402
from mcap.core import predictors  # noqa: E402
from mcap.core.evaluate import percentile, place, prediction_errors  # noqa: E402
from mcap.core.recommend import costs_of, recommend  # noqa: E402
from mcap.core.setup import mismatch  # noqa: E402
from mcap.core.types import Run  # noqa: E402
from mcap.io.jsonio import load_profile, load_sweep  # noqa: E402


def _ok(sweep_runs):
    return [r for r in sweep_runs if r.status == "ok" and r.peaks]


def _row(label, costs, runs, all_runs, expand=None):
    """p50/p90/max |error| over ``runs`` and exact's pick placed among ``all_runs``."""
    pts = prediction_errors(costs, runs)
    err = [abs(p.error) for p in pts]
    rec = recommend(costs, len(runs[0].balance), "exact")
    pick = rec.balance if expand is None else expand(rec.balance)
    placed = place("exact", pick, rec.predicted_peak, all_runs)
    best = min(r.peak for r in _ok(all_runs))
    measured = "-" if placed.measured_peak is None else f"{placed.measured_peak / 2**20:.2f}"
    ratio = "-" if placed.ratio is None else f"{placed.ratio:.3f}"
    print(f"  {label:<28} {len(pts):>6} {100 * percentile(err, 50):>6.2f}% "
          f"{100 * percentile(err, 90):>6.2f}% {100 * max(err):>6.2f}%  "
          f"{'-'.join(map(str, pick)):<14} {measured:>8} {best / 2**20:>8.2f} {ratio:>6}")


HEADER = (f"  {'':<28} {'points':>6} {'p50':>7} {'p90':>7} {'max':>7}  {'exact pick':<14} "
          f"{'MiB':>8} {'best':>8} {'ratio':>6}")


def _per_stage(costs, runs) -> list[float]:
    """|predicted - measured| / measured of every stage of every ok run."""
    out = []
    for r in _ok(runs):
        out += [abs(p - m) / m for p, m in zip(costs.peaks(r.balance), r.peaks)]
    return out


def bench_batch(capture_path, direct_path, sweep_path) -> int:
    cap, direct = load_profile(capture_path), load_profile(direct_path)
    if sweep_path == "-":  # no sweep: the direct profile's own runs, measured at the target
        why = mismatch(cap, direct, ("capture profile", "direct profile"))
        if why:
            print(f"refused: {why}")
            return 2
        print(f"{cap.model.spec}, batch {cap.setup.batch_size}: the batch line's predictions "
              f"against the {len(direct.runs)} profiling runs measured at the target")
        for name in predictors.names():
            costs = costs_of(cap, name)
            err = [abs(p.error) for p in prediction_errors(costs, direct.runs)]
            st = _per_stage(costs, direct.runs)
            print(f"  {name:<10} peak: p50 {100 * percentile(err, 50):.2f}% p90 "
                  f"{100 * percentile(err, 90):.2f}% max {100 * max(err):.2f}%; per stage: p90 "
                  f"{100 * percentile(st, 90):.2f}% max {100 * max(st):.2f}%")
        return 0
    sweep = load_sweep(sweep_path)
    for p, what in ((cap, "capture profile"), (direct, "direct profile")):
        why = mismatch(p, sweep, (what, "sweep"))
        if why:
            print(f"refused: {why}")
            return 2
    sizes = [v.batch_size for v in batchscale.pp_variants(cap)]
    print(f"{sweep.model.spec}, {sweep.setup.stages} stages, batch {sweep.setup.batch_size} in "
          f"{sweep.setup.chunks} micro-batches; capture profiled at {','.join(map(str, sizes))} "
          f"(extrapolated: {batchscale.extrapolated(cap)}), {len(_ok(sweep.runs))} ok runs in the sweep")
    print(f"  profiling runs: capture {sum(len(v.runs) for v in cap.variants)} "
          f"({sum(r.seconds for v in cap.variants for r in v.runs):.1f} s of runs), "
          f"direct {len(direct.runs)} ({sum(r.seconds for r in direct.runs):.1f} s of runs)")
    print(HEADER)
    ok = _ok(sweep.runs)
    for name in predictors.names():
        _row(f"{name}: batch line", costs_of(cap, name), ok, sweep.runs)
        _row(f"{name}: profiled at B", costs_of(direct, name), ok, sweep.runs)
    return 0


def bench_merge(full_path, sweep_path, targets, merged_paths) -> int:
    full, sweep = load_profile(full_path), load_sweep(sweep_path)
    why = mismatch(full, sweep)
    if why:
        print(f"refused: {why}")
        return 2
    L, G = full.model.num_layers, sweep.setup.stages
    ok = _ok(sweep.runs)
    print(f"{sweep.model.spec}: {L} layers, {G} stages, {len(ok)} ok runs in the sweep; "
          f"full profile {len(full.runs)} runs, {sum(r.seconds for r in full.runs):.1f} s of runs")
    print(HEADER)
    name = predictors.DEFAULT
    _row(f"L={L} {name}", costs_of(full, name), ok, sweep.runs)
    _row(f"L={L} paper", costs_of(full, "paper"), ok, sweep.runs)
    # Merged by III-A3's formulas from the full profile: Listing 1.1 only (no runs).
    cases = [(f"Lm={lm} formula, paper", "paper", merging.merge_profile(
        full, merging.merge_sizes(full.stats, lm))) for lm in targets]
    cases += [(f"{Path(p).name[:22]} {name}", name, load_profile(p)) for p in merged_paths]
    for label, pred, prof in cases:
        sizes = merging.sizes_of(prof)
        aligned = [Run(merging.contract(r.balance, sizes), r.status, r.peaks, r.seconds)
                   for r in ok if merging.contract_run(r, sizes) is not None]
        if not aligned:
            print(f"  {label}: no sweep partitioning falls on merged boundaries")
            continue
        _row(label, costs_of(prof, pred), aligned, sweep.runs,
             expand=lambda b, s=sizes: merging.expand(b, s))
        print(f"  {'':<28} merged sizes {','.join(map(str, sizes))}")
        variants = batchscale.pp_variants(prof)
        if variants:  # profile --merge-to: one pass on all layers at the smallest size first
            total = len(full.runs) + sum(len(v.runs) for v in variants)
            print(f"  {'':<28} profiling runs: {len(full.runs)} on all layers + "
                  f"{total - len(full.runs)} on merged = {total} (without merging: "
                  f"{len(full.runs) * len(variants)})")
        for v in variants:
            print(f"  {'':<28} batch {v.batch_size} on merged layers: {len(v.runs)} runs, "
                  f"{sum(r.seconds for r in v.runs if not r.composed):.1f} s of measured runs "
                  f"({sum(r.composed for r in v.runs)} composed)")
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 4 and argv[0] == "batch":
        return bench_batch(*argv[1:])
    if len(argv) >= 4 and argv[0] == "merge":
        return bench_merge(argv[1], argv[2], [int(t) for t in argv[3].split(",")], argv[4:])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main())
