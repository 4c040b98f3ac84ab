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

``--check N`` then measures N composed partitionings (drawn with seed 0) directly, with
``--no-reuse`` into the same store, and prints how many equal their composed runs exactly.

``--replay`` runs no stage process: it replays the reusing sweep on the ``--direct``
file's measurements under capacities that fit 10 %, 25 %, ... of its partitionings (a run
is oom when its largest stage is over), and prints how many partitionings were measured
and whether every composed status and peak equals the file's.

``--figures [--quick]`` prints bench/run.py's rows: the replay on the bundled full VGG11
sweep (``--quick``: at two capacities, else six) and, not with ``--quick``, the timed sweep
from a fresh store (minutes) compared with it.
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

from mcap.core.profiling.cover import greedy_cover, stage_keys  # noqa: E402
from mcap.io import jsonio  # noqa: E402


def compare(out: Path, direct: Path) -> dict:
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
    # Split by measured / composed, and by stage key: a difference the measured runs show
    # too, the same for a key in every partitioning, comes from the measuring, not reuse.
    for label, want in (("measured", False), ("composed", True)):
        runs = [r for r in ours.runs if r.composed == want and tuple(r.balance) in ref
                and r.status == "ok" == ref[tuple(r.balance)].status]
        same = sum(r.peaks == ref[tuple(r.balance)].peaks for r in runs)
        print(f"  {label}: {same}/{len(runs)} equal exactly")
    by_key = defaultdict(set)
    for r in ours.runs:
        d = ref.get(tuple(r.balance))
        if d is not None and r.status == "ok" == d.status:
            for k, a, b in zip(stage_keys(r.balance, schedule), r.peaks, d.peaks):
                by_key[k].add(a - b)
    differ = {k: v for k, v in by_key.items() if v != {0}}
    print(f"  stage keys whose peak differs: {len(differ)} of {len(by_key)}; each key's "
          f"difference the same in every partitioning: {all(len(v) == 1 for v in differ.values())}; "
          f"differences seen: {sorted(set().union(*differ.values())) if differ else []}")
    return {"compared": compared, "equal": equal, "composed": composed, "worst": worst,
            "keys": len(by_key), "keys_differ": len(differ),
            "constant": all(len(v) == 1 for v in differ.values()),
            "differences": sorted(set().union(*differ.values())) if differ else []}


def replay(direct: Path, shares=(0.1, 0.25, 0.5, 0.75, 0.9, 1.0)) -> list[dict]:
    from mcap.core.profiling.cover import Knowledge
    from mcap.core.types import Run
    from mcap.workflow import reuse

    sweep = jsonio.load_sweep(direct)
    truth = {tuple(r.balance): r for r in sweep.runs if r.status == "ok"}
    balances = list(truth)
    tops = sorted(max(r.peaks) for r in truth.values())

    class Bar:
        total = 0

        def grow(self, n):
            self.total += n

    class Replayed:  # the Measurer's one method, answered from the file
        def __init__(self, capacity):
            self.capacity, self.bar, self.asked = capacity, Bar(), 0

        def get(self, b):
            self.asked += 1
            r = truth[b]
            return r if max(r.peaks) <= self.capacity else Run(b, "oom", None, 1.0)

    out = []
    for share in shares:
        capacity = tops[min(int(len(tops) * share), len(tops) - 1)]
        m, know = Replayed(capacity), Knowledge(sweep.setup.schedule, sweep.setup.stages)
        cover = reuse.plan_cover(know, {}, balances, sweep.setup.schedule)
        result = reuse.sweep_reusing(m, know, {}, cover, balances)
        right = all(r.status == ("ok" if max(truth[r.balance].peaks) <= capacity else "oom")
                    and (r.status != "ok" or r.peaks == truth[r.balance].peaks)
                    for r in result.runs)
        oom = sum(r.status == "oom" for r in result.runs)
        print(f"capacity fitting {share:.0%}: {oom} oom of {len(balances)}; measured {m.asked} "
              f"({len(cover)} cover + {result.direct} direct); every run right: {right}")
        out.append({"share": share, "oom": oom, "of": len(balances), "measured": m.asked,
                    "cover": len(cover), "direct": result.direct, "right": right})
    return out


def timed_sweep(model: str, stages: str, batch_size: str, chunks: str, out: Path,
                store: Path) -> float:
    """``python -m mcap sweep`` (reuse on) into a fresh ``store``: its wall seconds (what
    it printed goes to stdout; RuntimeError with its last error line when it fails)."""
    for p in (store, Path(f"{store}-wal"), Path(f"{store}-shm")):
        p.unlink(missing_ok=True)  # a fresh store: nothing reused from earlier runs
    cmd = [sys.executable, "-m", "mcap", "sweep", "--model", model, "--stages",
           stages, "--batch-size", batch_size, "--chunks", chunks,
           "--out", str(out), "--store", str(store)]
    print("$", " ".join(cmd), flush=True)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    if done.returncode:
        print(done.stderr[-2000:])
        print(f"sweep failed (exit {done.returncode})")
        last = (done.stderr.strip().splitlines() or [""])[-1]
        raise RuntimeError(f"sweep failed (exit {done.returncode}): {last}")
    print(done.stdout.strip())
    print(f"wall time {wall:.1f} s ({wall / 60:.2f} min)")
    return wall


DIRECT = ROOT / "data" / "vgg11-h512-b8-cpu4-full.sweep.json"  # every partitioning measured


def figures(quick: bool = False) -> list:
    """bench/run.py's rows (module docstring)."""
    import tempfile

    from benchtable import Figure
    shares = (1.0, 0.5) if quick else (0.1, 0.25, 0.5, 0.75, 0.9, 1.0)
    got = replay(DIRECT, shares)
    full = got[[g["share"] for g in got].index(1.0)]
    out = [Figure(f"stage reuse replayed on {DIRECT.name.removesuffix('.sweep.json')}: "
                  "partitionings measured to know all",
                  f"{full['measured']:,} of {full['of']:,} (the cover) with no capacity; under "
                  "capacities fitting " + ", ".join(
                      f"{g['share']:.0%}: {g['measured']:,}" for g in got if g["share"] != 1.0)
                  + "; every composed status and peak equal to the direct sweep's: "
                  + ("yes" if all(g["right"] for g in got) else "NO"),
                  "every composed run equal to the direct sweep (issue 13 item 1)")]
    if not quick:
        with tempfile.TemporaryDirectory(prefix="mcap-reuse-") as tmp:
            wall = timed_sweep("vgg11:image_size=32,hidden=512", "4", "8", "4",
                               Path(tmp) / "full.sweep.json", Path(tmp) / "reuse.sqlite")
            c = compare(Path(tmp) / "full.sweep.json", DIRECT)
        same = (f"{c['equal']:,} of {c['compared']:,} partitionings equal to {DIRECT.name} to "
                "the byte")
        if c["keys_differ"]:  # another machine measured the file: a constant per stage key
            same += (f"; the others differ on {c['keys_differ']} of {c['keys']} stage keys by "
                     f"{', '.join(f'{d:+,}' for d in c['differences'])} B, each key by the same "
                     f"bytes in every partitioning: {'yes' if c['constant'] else 'NO'}")
        out.append(Figure("full VGG11 CPU sweep with stage reuse (vgg11:image_size=32,hidden=512, "
                          "batch 8 in 4, 4 stages), fresh store",
                          f"{wall / 60:.2f} min (one run); {same}",
                          "<= 4 min; every run equal to the direct sweep (issue 13 item 1)",
                          timing=True))
    return out


def check(out: Path, store: Path, n: int) -> None:
    import io
    import random

    from mcap.store import Store
    from mcap.workflow.profiling import sweep

    ours = jsonio.load_sweep(out)
    composed = [r for r in ours.runs if r.composed and r.status == "ok"]
    picked = random.Random(0).sample(composed, min(n, len(composed)))
    started = time.monotonic()
    with Store(store) as st:
        direct = sweep(ours.model.spec, ours.setup, None, store=st, stream=io.StringIO(),
                       reuse=False, balances=[r.balance for r in picked])
    same = sum(c.peaks == d.peaks and c.breakdown == d.breakdown
               for c, d in zip(picked, direct.sweep.runs))
    worst = max((max(abs(a - b) for a, b in zip(c.peaks, d.peaks))
                 for c, d in zip(picked, direct.sweep.runs) if d.status == "ok"), default=0)
    print(f"{len(picked)} composed partitionings measured directly in "
          f"{time.monotonic() - started:.0f} s: {same} equal exactly (peaks and breakdowns); "
          f"largest difference {worst} bytes")


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
    ap.add_argument("--replay", action="store_true")
    ap.add_argument("--check", type=int, default=0, metavar="N")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    ap.add_argument("--quick", action="store_true", help="with --figures: replay only")
    args = ap.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return 0
    if args.replay:
        if not args.direct:
            ap.error("--replay needs --direct FILE")
        replay(args.direct)
        return 0
    if not args.compare_only:
        try:
            timed_sweep(args.model, args.stages, args.batch_size, args.chunks, args.out,
                        args.store)
        except RuntimeError:
            return 1
    sweep = jsonio.load_sweep(args.out)
    balances = [tuple(r.balance) for r in sweep.runs]
    measured = [r for r in sweep.runs if not r.composed]
    cover = greedy_cover(balances, sweep.setup.schedule)
    print(f"{len(balances)} partitionings: {len(measured)} measured "
          f"(greedy cover of all of them: {len(cover)}), {len(balances) - len(measured)} composed")
    if args.direct:
        compare(args.out, args.direct)
    if args.check:
        check(args.out, args.store, args.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
