"""Measurement truth on a GPU (issue 11, item 5): is a stage's peak the same whatever ran
before it, and how good is the default predictor on clean GPU data?

    python bench/bench_gpu_truth.py                       # CUDA: the small VGG11 setup
    python bench/bench_gpu_truth.py --device cpu --sample 12   # the same steps on CPU processes
    python bench/bench_gpu_truth.py --figures     # bench/run.py's rows, from the bundled H200 pairs

Steps (each a project command, into a fresh store under ``--work``):

1. ``python -m mcap profile`` of ``vgg11:image_size=32,hidden=512``, batch 8, 4 micro-batches,
   4 stages (the setup of ``../shared/gpu-h100``);
2. ``python -m mcap sweep --no-reuse --sample N --seed S``: N partitionings measured one by
   one in the seeded random order of the draw (a shuffled order, so a stage is measured
   after different predecessors), every one directly;
3. the default predictor's pick, measured with ``python -m mcap measure`` if the sample did
   not hold it.

Prints: the largest spread of one stage (same first layer, last layer and position) across
the runs that measured it (target: 0 on CPU, at most 0.1% on GPU); the default predictor's
p50 / p90 / max error of the overall peak and per stage; the pick's rank and ratio to the
best of the sample; Spearman / Kendall against the bundled CPU full sweep over the
partitionings both measured. The profile and sweep files are left in ``--work`` to bundle
(with their provenance) when the run was clean. Budget: about 10 minutes on one H100 with
the default sample of 150.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcap.core.evaluate import percentile, place, rank_agreement  # noqa: E402
from mcap.core.partition import windows  # noqa: E402
from mcap.core.recommend import costs_of, recommend  # noqa: E402
from mcap.core.types import Run  # noqa: E402
from mcap.io import jsonio  # noqa: E402

MODEL = "vgg11:image_size=32,hidden=512"
CPU_FULL = ROOT / "data" / "vgg11-h512-b8-cpu4-full.sweep.json"


def mcap(*args: str) -> str:
    cmd = [sys.executable, "-m", "mcap", *args]
    print("$", " ".join(cmd[1:]), flush=True)
    done = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    if done.returncode not in (0, 1):  # 1: an oom/failed measure, reported below
        raise SystemExit(f"command failed with exit {done.returncode}")
    return done.stdout


def spread(runs) -> tuple[float, tuple, int]:
    """The largest (max - min) / min of one stage key's peaks across the runs, that key
    (with its count), and how many keys were measured more than once."""
    seen = defaultdict(list)
    for r in runs:
        if r.status != "ok" or not r.peaks:
            continue
        G = len(r.balance)
        for i, ((a, z), p) in enumerate(zip(windows(r.balance), r.peaks)):
            seen[(a, z, "first" if i == 0 else "last" if i == G - 1 else "middle")].append(p)
    worst, key = 0.0, None
    repeated = [(k, v) for k, v in seen.items() if len(v) > 1]
    for k, v in repeated:
        if key is None or (max(v) - min(v)) / min(v) > worst:
            worst, key = (max(v) - min(v)) / min(v), (k, len(v))
    return worst, key, len(repeated)


# The H200 pairs in data/ (PROVENANCE.md): stages run alone (bench/gpu_acceptance.py), and the
# earlier run with the stages together on one GPU, exchanging over CUDA IPC.
BUNDLED = (("stages alone", "vgg11-h512-b8-h200x4-alone.profile.json",
            "vgg11-h512-b8-h200x4-alone-sample150-seed5.sweep.json"),
           ("stages together, ipc", "vgg11-h512-b8-h200x4.profile.json",
            "vgg11-h512-b8-h200x4-sample150-seed5.sweep.json"))


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: the largest same-stage spread of the bundled H200 pairs (their
    profile's runs and their sweep's). Pure: nothing is measured; ``quick`` changes nothing."""
    from benchtable import Figure
    out = []
    for how, prof, sweep in BUNDLED:
        runs = list(jsonio.load_sweep(ROOT / "data" / sweep).runs) + list(
            jsonio.load_profile(ROOT / "data" / prof).runs)
        worst, key, repeated = spread(runs)
        most = max(n for n in _counts(runs).values())
        out.append(Figure(
            f"same stage across runs and orders, largest spread: H200 {how} "
            f"({sweep.removesuffix('.sweep.json')} + its profile)",
            f"{100 * worst:.3f}% over the {repeated} stages measured more than once (up to "
            f"{most} times)", "<= 0.1% on a GPU, 0 on CPU (issue 11 item 5)"))
    return out


def _counts(runs) -> dict:
    seen = defaultdict(int)
    for r in runs:
        if r.status == "ok" and r.peaks:
            G = len(r.balance)
            for i, (a, z) in enumerate(windows(r.balance)):
                seen[(a, z, "first" if i == 0 else "last" if i == G - 1 else "middle")] += 1
    return seen


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", action="store_true",
                    help="print bench/run.py's rows (the bundled H200 pairs; measures nothing)")
    ap.add_argument("--quick", action="store_true", help="with --figures: the same (pure)")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--sample", type=int, default=150)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="/tmp/mcap-gpu-truth", help="store and output files")
    args = ap.parse_args(argv)
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return 0
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    tag = f"vgg11-h512-b8-{args.device}4"
    store, prof_path = work / "truth.sqlite", work / f"{tag}.profile.json"
    sweep_path = work / f"{tag}-sample{args.sample}-seed{args.seed}.sweep.json"
    for p in (store, prof_path, sweep_path):
        if p.exists():
            p.unlink()  # a fresh store: nothing is reused from an earlier run
    setup = ["--model", MODEL, "--stages", "4", "--batch-size", "8", "--chunks", "4",
             "--device", args.device, "--store", str(store)]
    t0 = time.perf_counter()
    mcap("profile", *setup, "--out", str(prof_path))
    mcap("sweep", *setup, "--no-reuse", "--sample", str(args.sample), "--seed",
         str(args.seed), "--out", str(sweep_path))
    profile, sweep = jsonio.load_profile(prof_path), jsonio.load_sweep(sweep_path)
    pick = recommend(profile, 4, "exact")
    runs = list(sweep.runs)
    if not any(tuple(r.balance) == pick.balance for r in runs):
        out = json.loads(mcap("measure", *setup, "--balance", ",".join(map(str, pick.balance)),
                              "--json"))
        runs.append(Run(tuple(out["balance"]), out["status"],
                        tuple(out["peaks"]) if out["peaks"] else None, out["seconds"]))
    wall = time.perf_counter() - t0

    worst, key, repeated = spread(runs + list(profile.runs))
    costs = costs_of(profile)
    ok = [r for r in runs if r.status == "ok" and r.peaks]
    overall = [abs(max(costs.peaks(r.balance)) - max(r.peaks)) / max(r.peaks) for r in ok]
    stage = [abs(p - m) / m for r in ok for p, m in zip(costs.peaks(r.balance), r.peaks)]
    where = place("exact", pick.balance, pick.predicted_peak, runs)
    print(f"\ndevice {args.device}, machine: {sweep.machine}")
    print(f"wall time {wall:.0f} s for the profile, {len(sweep.runs)} sampled partitionings "
          f"and the pick")
    print(f"largest same-stage spread: {100 * worst:.3f}% over the {repeated} stages measured "
          f"more than once" + (f" (worst: stage {key[0]}, measured {key[1]} times)" if key
                               else " (none: raise --sample)"))
    print(f"default predictor ({costs.predictor}) over {len(ok)} ok runs: overall p50 "
          f"{100 * percentile(overall, 50):.2f}% p90 {100 * percentile(overall, 90):.2f}% max "
          f"{100 * max(overall):.2f}%; per stage p90 {100 * percentile(stage, 90):.2f}% max "
          f"{100 * max(stage):.2f}%")
    print(f"exact's pick {','.join(map(str, pick.balance))}: rank {where.rank} of {len(ok)}, "
          f"{where.ratio:.3f}x the sample's best" if where.rank else
          f"exact's pick {pick.balance}: {where.note}")
    if CPU_FULL.exists() and args.device == "cuda":
        r = rank_agreement(jsonio.load_sweep(CPU_FULL).runs, runs)
        print(f"vs the bundled CPU full sweep over {r.n} partitionings: Spearman "
              f"{r.spearman:.3f}, Kendall {r.kendall:.3f}; CPU's best ranks "
              f"{r.best_ranks[0]}-{r.best_ranks[1]} here ({r.best_ratios[0]:.3f}x)")
    print(f"files: {prof_path} {sweep_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
