"""The layer merger on hybrid profiling (CAPTURE III-A3 with III-A1): what ``profile

Archived (issue 27): the one-off behind bench/log/2026-11-25-capture-merger-dp-tp.md, kept for
the record. Runs as is (minutes: it profiles and measures).
--parallel dp,tp --merge-to Lm`` saves in runs and time, and what it costs in per-device
error, against the same profile without merging.

    python bench/archive/bench_merge_parallel.py [--model SPEC] [--merge-to 5,6] [--plans 12]
                                         [--seed 0] [--work DIR] [--out FILE.json]

Each profile is the command a user types (``python -m mcap profile --model M --stages 4
--batch-size 8 --chunks 2 --parallel dp,tp [--merge-to Lm]``), each in a fresh store so no
run is shared between them; its runs are the store's records after it (every run measured,
pipeline-only and dp/tp; composed ones left out), its seconds the command's wall time (with
the start-up of each set of device processes) and "in runs" the measured runs' own seconds.
"plans" counts the plans on 4 devices (degrees 1 and 2) that the profile can place. Then a seeded sample of
hybrid plans on 4 devices whose stage boundaries fall between the merged layers of every
merged profile (the only plans a merged profile can place), plus each profile's ``recommend
--mesh 1x4`` pick, is measured once on engine hybrid, and each device's measured peak is
compared with every profile's prediction (``HybridCosts(profile).peaks(plan)``, default
predictor). Plans any profile ran as a profiling run are left out.
"""
from __future__ import annotations

import argparse
import datetime
import json
import platform
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mcap.core.capture import merging  # noqa: E402
from mcap.core.evaluate import percentile  # noqa: E402
from mcap.core.capture.plan import HybridPlan, StageConfig, parse_mesh  # noqa: E402
from mcap.core.capture.predict import HybridCosts, recommend_mesh  # noqa: E402
from mcap.io import jsonio  # noqa: E402

GPT = "gpt:layers=6,hidden=64,heads=4,vocab=256,seq=16"  # 8 layers
DEVICES, BATCH, CHUNKS = 4, 8, 2


def profile(spec: str, merge_to, work: Path) -> dict:
    from mcap.cli.main import main
    from mcap.store import Store

    tag = "full" if merge_to is None else f"m{merge_to}"
    out, store = work / f"{tag}.profile.json", work / f"{tag}.sqlite"
    for p in (out, store):
        p.unlink(missing_ok=True)
    argv = ["profile", "--model", spec, "--stages", str(DEVICES), "--batch-size", str(BATCH),
            "--chunks", str(CHUNKS), "--parallel", "dp,tp", "--store", str(store),
            "--out", str(out), "--timeout", "300"]
    if merge_to is not None:
        argv += ["--merge-to", str(merge_to)]
    started = time.monotonic()
    if main(argv) != 0:
        raise SystemExit(f"profile failed: {' '.join(argv)}")
    seconds = time.monotonic() - started
    prof = jsonio.load_profile(out)
    real = merging.real_spec(prof)
    with Store(store) as s:
        # Measured runs: those of the real model's studies, not composed (a merged profile's
        # own runs are saved again with it, over the merged layers, in its merged model's
        # study; composed runs are saved with the profile too).
        studies = {st.id: st for st in s.list_studies()}
        engine = {i: st.setup.engine for i, st in studies.items()}
        records = [r for r in s.run_records()
                   if not r.run.composed and studies[r.study_id].spec == real]
        hybrid = sum(1 for r in records if engine[r.study_id].startswith("hybrid:"))  # dp/tp
        run_seconds = sum(r.run.seconds for r in records)
    return {"tag": tag, "merge_to": merge_to, "profile": prof, "seconds": seconds,
            "runs": len(records), "hybrid_runs": hybrid, "run_seconds": run_seconds, "path": str(out),
            "command": "python -m mcap " + " ".join(argv)}


def plans_over(layers: int, devices: int):
    """Every plan of ``layers`` layers on ``devices`` devices with degrees 1 and 2 (a
    4-device profile predicts dp2/tp2, not dp4/tp4)."""
    out = []

    def rec(left, devs, stages):
        if left == 0 and devs == 0:
            out.append(HybridPlan(tuple(stages)))
            return
        if left == 0 or devs == 0:
            return
        for n in range(1, left + 1):
            rec(left - n, devs - 1, stages + [StageConfig(n)])
            if devs >= 2:
                for kind in ("dp", "tp"):
                    rec(left - n, devs - 2, stages + [StageConfig(n, kind, 2)])
    rec(layers, devices, [])
    return out


def run_keys(prof) -> set:
    """The plans the profile ran (over the real layers), as (balance, layout) keys."""
    sizes = merging.sizes_of(prof)
    keys = set()
    for r in prof.runs:
        b = r.balance if sizes is None else merging.expand(r.balance, sizes)
        keys.add((tuple(b), ("pp",) * len(b)))
    for v in prof.variants:
        for r in v.runs:
            b = r.balance if sizes is None else merging.expand(r.balance, sizes)
            keys.add((tuple(b), (f"{v.parallel}{v.degree}",) * len(b)))
    return keys


def key(plan: HybridPlan):
    return (plan.balance, tuple("pp" if s.parallel == "pp" else f"{s.parallel}{s.degree}"
                                for s in plan.stages))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=GPT)
    ap.add_argument("--merge-to", default="5,6")
    ap.add_argument("--plans", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", type=Path, default=Path(".mcap/merge-parallel"))
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)

    from mcap.core.types import Setup
    from mcap.runner import open_runner

    merges = [int(x) for x in args.merge_to.split(",") if x]
    results = [profile(args.model, None, args.work)] + \
              [profile(args.model, m, args.work) for m in merges]
    real = results[0]["profile"].model.num_layers
    # plans every merged profile can place: boundaries on all their merged boundaries
    cuts = [set(sum(s[:i + 1]) for i in range(len(s)))
            for s in (merging.sizes_of(r["profile"]) for r in results[1:])]
    ran = set().union(*(run_keys(r["profile"]) for r in results))
    pool = [p for p in plans_over(real, DEVICES)
            if all(set(sum(p.balance[:i + 1]) for i in range(len(p.stages))) <= c for c in cuts)
            and key(p) not in ran]
    picks = []
    for r in results:
        rec = recommend_mesh(r["profile"], parse_mesh(f"1x{DEVICES}"))
        r["pick"] = rec.plan.text
        if rec.plan not in picks and key(rec.plan) not in ran and rec.plan in pool:
            picks.append(rec.plan)
    rng = random.Random(args.seed)
    drawn = rng.sample([p for p in pool if p not in picks], min(args.plans, len(pool)))
    plans = picks + drawn
    print(f"{len(pool)} placeable plans not run while profiling; measuring {len(plans)}",
          file=sys.stderr)

    measured = {}
    setup = Setup(stages=DEVICES, batch_size=BATCH, chunks=CHUNKS, engine="hybrid")
    with open_runner(args.model, setup, timeout=300) as runner:
        for p in plans:
            run = runner.measure_plan(p)
            if run.status == "ok":
                measured[p.text] = list(run.peaks)
            print(f"  {p.text}: {run.status} {run.peaks}", file=sys.stderr)

    print(f"model {args.model} ({real} layers), {DEVICES} CPU devices, batch {BATCH} in "
          f"{CHUNKS} micro-batches; {len(measured)} plans measured, "
          f"{sum(len(v) for v in measured.values())} devices")
    print(f"{'profile':<8} {'runs':>5} {'dp/tp':>6} {'seconds':>8} {'in runs':>8} "
          f"{'plans':>6} {'p50':>6} {'p90':>6} {'max':>6}  pick (1x{DEVICES})")
    summary = []
    every = plans_over(real, DEVICES)
    for r in results:
        sizes = merging.sizes_of(r["profile"])
        cut = None if sizes is None else set(sum(sizes[:i + 1]) for i in range(len(sizes)))
        placeable = len(every) if cut is None else sum(
            set(sum(p.balance[:i + 1]) for i in range(len(p.stages))) <= cut for p in every)
        hc = HybridCosts(r["profile"])
        errs = []
        for text, peaks in measured.items():
            from mcap.core.capture.plan import parse_plan
            pred = hc.peaks(parse_plan(text))
            errs += [abs(a - b) / b for a, b in zip(pred, peaks)]
        row = {"profile": r["tag"], "command": r["command"], "runs": r["runs"],
               "hybrid_runs": r["hybrid_runs"], "seconds": round(r["seconds"], 1),
               "run_seconds": round(r["run_seconds"], 1), "placeable": placeable,
               "p50": percentile(errs, 50), "p90": percentile(errs, 90), "max": max(errs),
               "pick": r["pick"], "pick_measured": measured.get(r["pick"])}
        summary.append(row)
        print(f"{r['tag']:<8} {r['runs']:>5} {r['hybrid_runs']:>6} {r['seconds']:>8.1f} "
              f"{r['run_seconds']:>8.1f} {placeable:>6} {100 * row['p50']:>5.2f}% {100 * row['p90']:>5.2f}% {100 * row['max']:>5.2f}%  "
              f"{r['pick']}"
              + (f" (measured peak {max(measured[r['pick']]):,} B)" if r['pick'] in measured else ""))
    if args.out:
        args.out.write_text(json.dumps({
            "date": datetime.date.today().isoformat(), "machine": platform.processor() or
            platform.machine(), "model": args.model, "summary": summary,
            "measured": measured}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
