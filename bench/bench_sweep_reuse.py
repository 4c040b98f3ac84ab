"""Time a stage-reuse sweep and check it against a direct sweep (issue 13, item 1).

    python bench/bench_sweep_reuse.py [--model vgg11:image_size=32,hidden=512] [--stages 4]
        [--batch-size 8] [--chunks 4] [--out /tmp/full.sweep.json] [--store /tmp/reuse.sqlite]
        [--direct data/vgg11-h512-b8-cpu4-full.sweep.json] [--compare-only]

Runs ``python -m mcap sweep`` (reuse is its default) into a fresh store, prints the
cover size (partitionings measured), the wall time, and, given ``--direct`` (a sweep
file where every partitioning was measured), how many composed partitionings equal the
direct measurement exactly, stage by stage, and the largest difference. It also prints
the spread of each stage key's peak inside the direct file (0 where composing is exact).
``--compare-only`` skips the sweep and compares an existing ``--out``.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcap.core.cover import greedy_cover, stage_keys  # noqa: E402
from mcap.io import jsonio  # noqa: E402


def compare(out: Path, direct: Path) -> None:
    ours, theirs = jsonio.load_sweep(out), jsonio.load_sweep(direct)
    ref = {tuple(r.balance): r for r in theirs.runs}
    schedule = theirs.setup.schedule
    spread = defaultdict(set)
    for r in theirs.runs:
        if r.status == "ok":
            for k, p in zip(stage_keys(r.balance, schedule), r.peaks):
                spread[k].add(p)
    worst_spread = max((max(v) - min(v) for v in spread.values()), default=0)
    print(f"direct file: {len(theirs.runs)} runs, {len(spread)} stage keys, largest spread of "
          f"one key's peak across partitionings {worst_spread} bytes")
    compared = equal = status_diff = 0
    worst, worst_rel, worst_at = 0, 0.0, None
    for r in ours.runs:
        d = ref.get(tuple(r.balance))
        if d is None:
            continue
        compared += 1
        if r.status != d.status:
            status_diff += 1
            continue
        if r.status != "ok":
            equal += 1
            continue
        diff = max(abs(a - b) for a, b in zip(r.peaks, d.peaks))
        rel = max(abs(a - b) / b for a, b in zip(r.peaks, d.peaks) if b)
        equal += diff == 0
        if diff > worst:
            worst, worst_rel, worst_at = diff, rel, tuple(r.balance)
    composed = sum(r.composed for r in ours.runs)
    print(f"compared {compared} partitionings ({composed} composed): {equal} equal exactly "
          f"on every stage, {status_diff} with another status; largest per-stage difference "
          f"{worst} bytes ({worst_rel:.2%})" + (f" at {list(worst_at)}" if worst_at else ""))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vgg11:image_size=32,hidden=512")
    ap.add_argument("--stages", default="4")
    ap.add_argument("--batch-size", default="8")
    ap.add_argument("--chunks", default="4")
    ap.add_argument("--out", type=Path, default=Path("/tmp/full.sweep.json"))
    ap.add_argument("--store", type=Path, default=Path("/tmp/reuse.sqlite"))
    ap.add_argument("--direct", type=Path, default=None)
    ap.add_argument("--compare-only", action="store_true")
    args = ap.parse_args()
    if not args.compare_only:
        for p in (args.store, Path(f"{args.store}-wal"), Path(f"{args.store}-shm")):
            p.unlink(missing_ok=True)  # a fresh store: nothing reused from earlier runs
        cmd = [sys.executable, "-m", "mcap", "sweep", "--model", args.model, "--stages",
               args.stages, "--batch-size", args.batch_size, "--chunks", args.chunks,
               "--out", str(args.out), "--store", str(args.store)]
        print("$", " ".join(cmd), flush=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        started = time.monotonic()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode:
            print(done.stderr[-2000:])
            print(f"sweep failed (exit {done.returncode})")
            return 1
        print(done.stdout.strip())
        print(f"wall time {wall:.1f} s ({wall / 60:.2f} min)")
    sweep = jsonio.load_sweep(args.out)
    balances = [tuple(r.balance) for r in sweep.runs]
    measured = [r for r in sweep.runs if not r.composed]
    cover = greedy_cover(balances, sweep.setup.schedule)
    print(f"{len(balances)} partitionings: {len(measured)} measured "
          f"(greedy cover of all of them: {len(cover)}), {len(balances) - len(measured)} composed")
    if args.direct:
        compare(args.out, args.direct)
    return 0


if __name__ == "__main__":
    sys.exit(main())
