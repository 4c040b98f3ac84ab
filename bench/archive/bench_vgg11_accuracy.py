"""VGG11 prediction accuracy on CPU stage processes (issue 4 acceptance; paper 4.2).

Archived (issue 27): issue 4's acceptance run (bench/log/2026-11-22-vgg11-accuracy-cpu.md),
kept for the record; bench/bench_predictors.py scores every bundled
pair now. Runs as is, but note that its default --profile-out is data/vgg11-cpu4.profile.json
(relative to the current folder): pass --profile-out out/... not to overwrite the bundled file.

Profiles VGG11 (small images) on G CPU stage processes with mCAP's plan, then measures
N seeded random partitionings that were not profiled and prints the distribution of
|predicted - measured| / measured for the overall peak and for every stage, the
profiling wall time and the runs it needed. Resumable: runs go into the store as they
finish and are reused when the script is run again (delete the store to re-measure).

    python bench/archive/bench_vgg11_accuracy.py                        # defaults below
    python bench/archive/bench_vgg11_accuracy.py --samples 20 --seed 0 \
        --profile-out data/vgg11-cpu4.profile.json --store .mcap/bench-vgg11.sqlite
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcap.workflow import profiling  # noqa: E402
from mcap.core.partition import random_partitionings  # noqa: E402
from mcap.core.predict import predict  # noqa: E402
from mcap.store import Store  # noqa: E402
from mcap.core.types import Setup  # noqa: E402


def quantile(values, q):
    """Nearest-rank quantile (no interpolation): the value q of the data is at or below."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def describe(label, errors):
    return (f"{label:<22} n={len(errors):4d}  median {100 * statistics.median(errors):6.2f}%  "
            f"p90 {100 * quantile(errors, 0.9):6.2f}%  max {100 * max(errors):6.2f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vgg11:image_size=32")
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--samples", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", default=".mcap/bench-vgg11.sqlite")
    ap.add_argument("--profile-out", type=Path, default=Path("data/vgg11-cpu4.profile.json"))
    ap.add_argument("--sweep-out", type=Path, default=None,
                    help="also write the measured random partitionings as mcap.sweep/1")
    args = ap.parse_args(argv)

    setup = Setup(stages=args.stages, batch_size=args.batch_size, chunks=args.chunks)
    store = Store(args.store)
    started = time.monotonic()
    prof = profiling.profile(profiling.ProfileRequest(args.model, setup, args.profile_out), store=store)
    profile_wall = time.monotonic() - started
    p = prof.profile
    profiled = {r.balance for r in p.runs}
    ok_profile_runs = [r for r in p.runs if r.status == "ok"]

    draws = random_partitionings(p.model.num_layers, args.stages,
                                 args.samples + len(profiled), seed=args.seed)
    balances = [b for b in draws if b not in profiled][:args.samples]
    started = time.monotonic()
    sw = profiling.sweep(args.model, setup, args.sweep_out, store=store, balances=balances)
    sample_wall = time.monotonic() - started

    overall, per_stage, rows = [], [], []
    for run in sw.sweep.runs:
        if run.status != "ok":
            rows.append(f"  {run.balance}: {run.status} {run.error or ''}")
            continue
        pred = predict(p.stats, run.balance)
        err = abs(pred.peak - run.peak) / run.peak
        overall.append(err)
        per_stage.extend(abs(a - b) / b for a, b in zip(pred.peaks, run.peaks))
        rows.append(f"  {str(run.balance):<18} measured {run.peak / 2**20:8.2f} MiB  predicted "
                    f"{pred.peak / 2**20:8.2f} MiB  error {100 * (pred.peak - run.peak) / run.peak:+7.2f}%")

    print(f"model {p.model.spec}, {p.model.num_layers} layers, {args.stages} CPU stage processes, "
          f"batch {args.batch_size} in {args.chunks} micro-batches, {setup.schedule}, "
          f"checkpoint {setup.checkpoint}, {setup.optimizer}")
    print(f"profiling: {len(p.runs)} runs ({len(ok_profile_runs)} ok, "
          f"{len(prof.tally.fallback)} fallback; paper: L-G+1 = "
          f"{p.model.num_layers - args.stages + 1}); this invocation measured "
          f"{prof.tally.measured}, reused {prof.tally.reused}, wall {profile_wall:.1f} s")
    seconds = [r.seconds for r in ok_profile_runs]
    if seconds:
        print(f"seconds per profiling run (median, stage processes warm): "
              f"{statistics.median(seconds):.2f}")
    print(f"random partitionings (seed {args.seed}): {len(sw.sweep.runs)}; this invocation "
          f"measured {sw.tally.measured}, reused {sw.tally.reused}, wall {sample_wall:.1f} s")
    print("\n".join(rows))
    if overall:
        print(describe("overall peak error", overall))
        print(describe("per-stage peak error", per_stage))
        within = sum(e <= 0.14 for e in overall) / len(overall)
        print(f"partitionings within 14% (paper: 90%): {100 * within:.0f}%; "
              f"within 5% (issue 6 goal: 90%): {100 * sum(e <= 0.05 for e in overall) / len(overall):.0f}%")
    print(f"profile written to {args.profile_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
