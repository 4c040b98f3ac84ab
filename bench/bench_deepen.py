"""Deep from shallow (issue 41, item 3): a profile of N identical blocks predicts the same
model with M blocks; how close are the deep model's measured stages?

    python bench/bench_deepen.py --profile SHALLOW.profile.json --sweep DEEP.sweep.json
    python bench/bench_deepen.py --run --workdir /tmp/deep      # measure the pair first

``--run`` measures the validation pair on this machine with mcap's own commands (into
``--workdir``; resumable through its store): CPU Llama at width 256 (vocab 32000, sequence
256, 4 stages, batch 4 in 4 micro-batches, GPipe), the shallow model with ``--blocks`` (N,
default 5) profiled with ``--scheme capture``, and ``--sample`` partitionings of the model
with 4N blocks swept. Then, as without ``--run``, it deepens the profile to the sweep's
block count (``python -m mcap evaluate --blocks M`` does the same) and prints, per
predictor, the per-stage error |predicted - measured| / measured (p50 / p90 / max, by stage
kind) and the partitioning-level error (its fullest stage), the figures issue 41 targets.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcap.core import predictors  # noqa: E402
from mcap.core.deepen import deepen, shallow_blocks, unmeasured  # noqa: E402
from mcap.core.evaluate import percentile  # noqa: E402
from mcap.core.profiling.stats import stage_windows  # noqa: E402
from mcap.core.recommend import costs_of  # noqa: E402
from mcap.io.jsonio import load_profile, load_sweep  # noqa: E402

LLAMA = ("hf:llama:hidden_size=256,num_attention_heads=4,num_key_value_heads=2,"
         "intermediate_size=688,vocab_size=32000,seq=256")
SETUP = ("--stages", "4", "--batch-size", "4", "--chunks", "4")


def run_pair(workdir: Path, blocks: int, sample: int, seed: int) -> tuple[Path, Path]:
    workdir.mkdir(parents=True, exist_ok=True)
    store = str(workdir / "store.sqlite")
    prof = workdir / f"llama-l{blocks}-capture.profile.json"
    sweep = workdir / f"llama-l{4 * blocks}-sample{sample}.sweep.json"
    mcap = [sys.executable, "-m", "mcap"]
    if not prof.exists():
        subprocess.run([*mcap, "profile", "--model", f"{LLAMA},num_hidden_layers={blocks}", *SETUP,
                        "--scheme", "capture", "--store", store, "--out", str(prof)], check=True)
    if not sweep.exists():
        subprocess.run([*mcap, "sweep", "--model", f"{LLAMA},num_hidden_layers={4 * blocks}", *SETUP,
                        "--sample", str(sample), "--seed", str(seed), "--store", store,
                        "--out", str(sweep)], check=True)
    return prof, sweep


def errors(profile, sweep, predictor: str):
    """(per-stage |error| by kind, partitioning-level |error|) of the deepened profile."""
    deep_blocks = sweep.model.num_layers - profile.model.num_layers + shallow_blocks(profile).count
    deep = deepen(profile, deep_blocks, sweep.model.spec)
    if deep.model.layers != sweep.model.layers:
        raise SystemExit(f"the sweep's layers are not the profile's model with {deep_blocks} blocks")
    costs = costs_of(deep, predictor)
    by_kind = {"first": [], "middle": [], "last": []}
    whole = []
    for r in sweep.runs:
        if r.status != "ok" or not r.peaks:
            continue
        got = costs.peaks(r.balance)
        for (a, z), m, q in zip(stage_windows(r.balance), r.peaks, got):
            kind = "first" if a == 0 else "last" if z == sweep.model.num_layers - 1 else "middle"
            by_kind[kind].append(abs(q - m) / m)
        whole.append(abs(max(got) - r.peak) / r.peak)
    return by_kind, whole, deep


def line(name: str, values) -> str:
    if not values:
        return f"  {name:<14} -"
    return (f"  {name:<14} n={len(values):<4} p50 {100 * percentile(values, 50):5.2f}%  "
            f"p90 {100 * percentile(values, 90):5.2f}%  max {100 * max(values):5.2f}%")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", type=Path)
    ap.add_argument("--sweep", type=Path)
    ap.add_argument("--run", action="store_true", help="measure the Llama pair first")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/mcap-deepen"))
    ap.add_argument("--blocks", type=int, default=5, help="N, the shallow model's blocks (--run)")
    ap.add_argument("--sample", type=int, default=60, help="deep partitionings swept (--run)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if args.run:
        args.profile, args.sweep = run_pair(args.workdir, args.blocks, args.sample, args.seed)
    if args.profile is None or args.sweep is None:
        ap.error("give --profile and --sweep, or --run")
    profile, sweep = load_profile(args.profile), load_sweep(args.sweep)
    print(f"shallow: {profile.model.spec} ({profile.model.num_layers} layers, "
          f"{len(profile.runs)} profiling runs)")
    print(f"deep:    {sweep.model.spec} ({sweep.model.num_layers} layers, "
          f"{sum(r.status == 'ok' for r in sweep.runs)} ok partitionings)")
    for name in predictors.names():
        by_kind, whole, deep = errors(profile, sweep, name)
        stages = [e for v in by_kind.values() for e in v]
        print(f"predictor {name}:" + (f" (predicted only: {', '.join(unmeasured(deep))})"
                                       if unmeasured(deep) else ""))
        print(line("every stage", stages))
        for kind, values in by_kind.items():
            print(line(f"{kind} stages", values))
        print(line("partitioning", whole))
    return 0


if __name__ == "__main__":
    sys.exit(main())
