"""MPress plans' added time on CPU stage processes, read as CPU time (issue 16, item 7).

    python bench/bench_press_time.py                          # GPT, wide GPT, VGG11, AmoebaNet-D
    python bench/bench_press_time.py --models gpt-l6,vgg11-i64 --repeats 9
    python bench/bench_press_time.py --load data/press-time-cpu4.json   # reprint only

Why CPU time. On this kind of machine (2 cores, 4 stage processes of one intra-op thread,
other jobs beside them) an iteration's wall clock is mostly waiting for a core: the plain
run's own window moved by 1.3 s between repeats, while a plan adds tens of milliseconds
(bench/log/2026-11-25-mpress-event-model.md). The work a plan adds is the same
whether a core is free or not, and each stage process can read it: its CPU seconds over the
timed iterations (``StageResult.cpu_seconds``, ``time.process_time``, every thread of the
process). The prediction is the planner's own cost (``Problem.costs``: a recompute is the
layer's forward again per micro-batch, a swap its measured ``swap_seconds``, both read on
the same CPU clock by ``profile --press``, ``mcap.runner.press.stats.clock``), summed over
the layers each stage reduces. That is ``PressPlan.predicted_work_seconds`` per stage; the
wall-clock delay a user waits (``predicted_added_seconds``) is that work pushed through the
schedule, which this machine cannot check (a GPU can).

Per model (4 CPU stages, GPipe, batch 8 in 4 micro-batches, checkpoint never, as
``bench_press_eval.py``): ``profile --press`` into a scratch store, mCAP's partitioning,
``mpress`` and ``milp`` plans at 5 capacities from the smallest one any plan meets to the
keep-all peak; one runner measures the plain run and each distinct plan interleaved
``--repeats`` times. Measured added work per stage and iteration = (median CPU seconds of
the plan - median of the plain run) / iterations. Printed: per plan predicted vs measured
(summed over the stages it touches: those reducing a layer and the d2d targets), per reducing stage the same, and the share within 25%. A d2d swap's
receiving copy runs in the peer stage's process: the plan sums, not the per-stage rows,
are the check for plans that use it.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))

import argparse
import json
import statistics
import tempfile
import time

from bench_press_eval import FRACTIONS, MODELS  # noqa: E402  (the same models and capacities)

DEFAULT = ("gpt", "gpt-wide", "vgg11", "amoebanet")
WITHIN = 0.25  # issue 16's target for the added time


def evaluate(spec: str, repeats: int, store, stages: int = 4) -> dict:
    from mcap.core import press
    from mcap.core.partition import windows
    from mcap.core.recommend import recommend
    from mcap.core.types import Setup
    from mcap.runner import ITERATIONS, open_runner
    from mcap.workflow.profiling import ProfileRequest, profile

    setup = Setup(stages=stages, batch_size=8, chunks=4, checkpoint="never")
    t0 = time.monotonic()
    prof = profile(ProfileRequest(spec, setup, press=True), store=store).profile
    profile_s = time.monotonic() - t0
    balance = recommend(prof, stages, "exact").balance
    p = press.problem(prof, balance)
    lo, hi = press.smallest_capacity(p), max(p.base)
    plans = [press.solve(p, int(lo + f * (hi - lo)), m) for f in FRACTIONS for m in ("mpress", "milp")]
    distinct = [pl for pl in {pl.stages: pl for pl in plans}.values()
                if any(a.action != "keep" for st in pl.stages for a in st)]
    cpu: dict = {"plain": []} | {i: [] for i in range(len(distinct))}
    wall: dict = {k: [] for k in cpu}
    with open_runner(spec, setup) as runner:
        runner.measure(balance)  # warm-up, not counted
        for r in range(repeats):
            for key in cpu:
                run = runner.measure(balance, press=None if key == "plain" else distinct[key])
                if run.status != "ok":
                    raise SystemExit(f"{spec} {key}: {run.status} {run.error}")
                cpu[key].append([x.cpu_seconds for x in runner.last_results])
                wall[key].append(max(x.seconds for x in runner.last_results))
            print(f"  {spec}: repeat {r + 1}/{repeats}", file=sys.stderr, flush=True)
    med = {k: [statistics.median(v[s] for v in vs) for s in range(stages)] for k, vs in cpu.items()}
    rows = []
    for i, pl in enumerate(distinct):
        per_stage = []
        for s, (a, z) in enumerate(windows(balance)):
            acts = pl.stages[s]
            predicted = sum(p.costs[x.layer][x.action] for x in acts if x.action != "keep")
            per_stage.append({"predicted": predicted,
                              "measured": (med[i][s] - med["plain"][s]) / ITERATIONS,
                              "actions": sorted({x.action for x in acts if x.action != "keep"}),
                              "spread": (max(v[s] for v in cpu[i]) - min(v[s] for v in cpu[i]))
                              / ITERATIONS})
        rows.append({"plan": i, "capacity": pl.capacity_bytes, "method": pl.method,
                     "actions": [[x.action + (f">{x.target}" if x.target is not None else "")
                                  for x in st] for st in pl.stages],
                     "predicted_work": pl.predicted_work_seconds,
                     "predicted_delay": pl.predicted_added_seconds,
                     "stages": per_stage,
                     "wall_added": (statistics.median(wall[i]) - statistics.median(wall["plain"]))
                     / ITERATIONS})
    return {"spec": spec, "balance": list(balance), "profile_seconds": profile_s,
            "repeats": repeats, "plain_cpu": med["plain"],
            "plain_wall": statistics.median(wall["plain"]) / ITERATIONS,
            "plain_spread": [(max(v[s] for v in cpu["plain"]) - min(v[s] for v in cpu["plain"]))
                             / ITERATIONS for s in range(stages)],
            "rows": rows}


def _within(pred: float, meas: float) -> bool:
    return abs(meas - pred) <= WITHIN * pred


def report(results: list[dict]) -> None:
    ms = lambda x: f"{1000 * x:.1f}"  # noqa: E731
    plan_ok, stage_ok, ratios, stage_ratios = [], [], [], []
    for res in results:
        print(f"\n## {res['spec']}  balance {','.join(map(str, res['balance']))}  "
              f"({res['repeats']} repeats; plain run CPU ms/iteration per stage "
              f"{' '.join(ms(x / 2) for x in res['plain_cpu'])}, spread "
              f"{' '.join(ms(x) for x in res['plain_spread'])}; wall {ms(res['plain_wall'])})")
        print("| plan | reduces | added work ms/iter predicted / measured (plan) | per reducing stage |"
              " wall ms predicted delay / measured |")
        print("|---|---|---|---|---|")
        for r in res["rows"]:
            # the stages the plan touches: those reducing a layer and the d2d targets (a
            # stage it leaves alone adds nothing but its own noise to the sum)
            touched = {k for k, st in enumerate(r["actions"]) if any(a != "keep" for a in st)}
            touched |= {int(a.split(">")[1]) for st in r["actions"] for a in st if ">" in a}
            tot_p = sum(s["predicted"] for k, s in enumerate(r["stages"]) if k in touched)
            tot_m = sum(s["measured"] for k, s in enumerate(r["stages"]) if k in touched)
            if tot_p > 0:
                plan_ok.append(_within(tot_p, tot_m))
                ratios.append(tot_m / tot_p)
            cells = []
            for k, s in enumerate(r["stages"]):
                if not s["actions"]:
                    continue
                cells.append(f"{k} {'+'.join(a[:3] for a in s['actions'])}: {ms(s['predicted'])}/"
                             f"{ms(s['measured'])}")
                if s["predicted"] > 0 and "d2d" not in s["actions"]:
                    stage_ok.append(_within(s["predicted"], s["measured"]))
                    stage_ratios.append(s["measured"] / s["predicted"])
            acts = " ".join(f"{k}:" + ",".join(a[:3] for a in st)
                            for k, st in enumerate(r["actions"]) if any(a != "keep" for a in st))
            print(f"| {r['plan']} ({r['method']}) | {acts} | {ms(tot_p)} / {ms(tot_m)} "
                  f"({'ok' if tot_p > 0 and _within(tot_p, tot_m) else '**off**'}) | "
                  f"{'; '.join(cells)} | {ms(r['predicted_delay'])} / {r['wall_added'] * 1000:+.1f} |")
    print("\n## Added work (CPU seconds) predicted vs measured")
    if ratios:
        print(f"plans: {sum(plan_ok)}/{len(plan_ok)} within {100 * WITHIN:.0f}% "
              f"(measured/predicted median {statistics.median(ratios):.2f}, "
              f"min {min(ratios):.2f}, max {max(ratios):.2f})")
    if stage_ratios:
        print(f"reducing stages without d2d: {sum(stage_ok)}/{len(stage_ok)} within "
              f"{100 * WITHIN:.0f}% (median {statistics.median(stage_ratios):.2f}, "
              f"min {min(stage_ratios):.2f}, max {max(stage_ratios):.2f})")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default=",".join(DEFAULT), help=f"of {', '.join(MODELS)}")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    ap.add_argument("--load", type=Path, default=None, help="report a --json file, measure nothing")
    args = ap.parse_args(argv)
    if args.load:
        report(json.loads(args.load.read_text())["results"])
        return 0
    names = [m for m in args.models.split(",") if m]
    bad = [m for m in names if m not in MODELS]
    if bad or args.repeats < 3:
        print(f"bench_press_time: unknown model(s) {bad} (expected {', '.join(MODELS)}) or "
              f"--repeats {args.repeats} < 3", file=sys.stderr)
        return 2
    if args.json is not None and args.json.exists():
        print(f"bench_press_time: {args.json} exists; not overwriting it", file=sys.stderr)
        return 2
    from mcap.store import Store
    results = []
    with tempfile.TemporaryDirectory(prefix="mcap-press-time-") as tmp:
        store = Store(Path(tmp) / "store.sqlite")
        for name in names:
            results.append(evaluate(MODELS[name], args.repeats, store))
    report(results)
    if args.json is not None:
        args.json.write_text(json.dumps({"command": " ".join(sys.argv), "results": results},
                                        indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
