"""MPress plans measured for real on CPU stage processes (issue 16, items 1-2).

Archived (issue 27): the first MPress plans measured for real (issue 16 items 1-2;
bench/log/2026-11-23-mpress-plans-measured.md), kept for the record; bench/bench_press_eval.py
measures plans
against their predictions now. Runs as is (minutes).

    python bench/archive/bench_press.py                       # VGG11 32x32, batch 8, chunks 4, 3,3,5,19
    python bench/archive/bench_press.py --balance 8,8,7,7 --repeats 3

One runner (checkpoint never) measures the plain run and three plans of the same balance,
interleaved ``--repeats`` times: keep-all (must read the plain peaks exactly), every layer
recompute, every layer host swap, and stage 0's layers d2d to the last stage. Prints each
stage's peak (history-free: every repeat reads the same bytes, except a d2d target's, shown
as its range), the
added time (median window of the slowest stage, 2 iterations, minus plain's), and the
press statistics: per stage the saved bytes x micro-batches vs the plain run's ``other``
at its peak, and the bandwidths.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

import argparse
import dataclasses
import json
import statistics

from mcap.core.press.actions import LayerAction, keep_all
from mcap.core.types import Setup
from mcap.runner import ITERATIONS, open_runner
from mcap.runner.press.stats import measure


def all_of(plan, action, stages=None, target=None):
    return dataclasses.replace(plan, stages=tuple(
        tuple(LayerAction(a.layer, action, target if action == "d2d" else None) for a in st)
        if stages is None or s in stages else st for s, st in enumerate(plan.stages)))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vgg11:image_size=32")
    ap.add_argument("--balance", default="3,3,5,19")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None, help="also write the raw numbers here")
    args = ap.parse_args(argv)
    balance = tuple(int(n) for n in args.balance.split(","))
    G = len(balance)
    setup = Setup(stages=G, batch_size=args.batch_size, chunks=args.chunks, checkpoint="never")
    stats = measure(args.model, setup)
    keep = keep_all(args.model, balance)
    plans = {"plain": None, "keep": keep, "recompute": all_of(keep, "recompute"),
             "swap": all_of(keep, "swap"), "d2d0": all_of(keep, "d2d", {0}, G - 1)}
    runs = {k: [] for k in plans}
    with open_runner(args.model, setup) as runner:
        for _ in range(args.repeats):
            for name, plan in plans.items():
                run = runner.measure(balance, press=plan)
                assert run.status == "ok", (name, run.error)
                runs[name].append(run)
    window = {k: statistics.median(ITERATIONS * args.batch_size / r.samples_per_second
                                   for r in v) for k, v in runs.items()}
    # Peaks are history-free, so every repeat reads the same bytes, except a d2d target's:
    # the moved bytes live there on the sender's clock (from its forward until its backward
    # fetches them), so how many are resident at the target's own peak varies run to run.
    low = {k: [min(r.peaks[s] for r in v) for s in range(G)] for k, v in runs.items()}
    high = {k: [max(r.peaks[s] for r in v) for s in range(G)] for k, v in runs.items()}
    for k in runs:
        assert k == "d2d0" or low[k] == high[k], f"{k}: peaks differ between repeats"
    peaks = low
    bounds, first = [], 0
    for n in balance:
        bounds.append((first, first + n))
        first += n
    saved = [args.chunks * sum(stats.saved_bytes[a:b]) for a, b in bounds]
    other = [b.other for b in runs["plain"][0].breakdown]
    mib = lambda n: f"{n / 2**20:.2f}"  # noqa: E731

    def cell(k, s):
        return mib(low[k][s]) + ("" if low[k][s] == high[k][s] else f"-{mib(high[k][s])}")
    print(f"model {args.model}, balance {args.balance}, batch {args.batch_size}, chunks "
          f"{args.chunks}, checkpoint never, {args.repeats} repeats")
    print(f"host swap {stats.host_bandwidth / 1e9:.2f} GB/s, d2d {stats.d2d_bandwidth / 1e9:.2f}"
          " GB/s (one direction)")
    print("| stage | saved x chunks MiB | plain other MiB | plain | keep-all | all recompute |"
          " all swap | stage 0 d2d -> last |")
    print("|---|---|---|---|---|---|---|---|")
    for s in range(G):
        print(f"| {s} | {mib(saved[s])} | {mib(other[s])} | " + " | ".join(
            cell(k, s) for k in plans) + " |")
    print("| time (s, 2 iterations) | | | " + " | ".join(
        f"{window[k]:.2f}" + ("" if k == "plain" else f" ({window[k] - window['plain']:+.2f})")
        for k in plans) + " |")
    if args.json:
        args.json.write_text(json.dumps({
            "peaks": {k: [r.peaks for r in v] for k, v in runs.items()}, "window_seconds": window, "saved_times_chunks": saved,
            "plain_other": other, "press": dataclasses.asdict(stats)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
