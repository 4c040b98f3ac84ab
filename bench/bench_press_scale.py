"""The largest model that trains under a capacity with partitioning alone vs partitioning + an
MPress plan (issue 16, item 5 and its 1.3x target), predicted by ``scale --press`` and then
measured for real under the capacity.

    python bench/bench_press_scale.py                  # the GPT of bench/log/2026-11-25-mpress-event-model.md, hidden 192..320, 40 MiB
    python bench/bench_press_scale.py --json out.json

``mcap.workflow.scaling.scale_press`` profiles each size it visits (``profile --press``,
into a scratch store) and decides from predictions. Then, for every profiled size, one
runner under the capacity (the CPU tracker raises out-of-memory beyond it, as a full GPU
would) measures mCAP's exact pick with every layer kept and the joint pick with its plan
(``mcap.core.press.joint``, what ``recommend --press`` returns). Printed: per size the
predicted and measured outcome of both, and the largest size each way (predicted and
measured) with the ratio of trainable parameters.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import argparse
import dataclasses
import json
import tempfile
import time

MODEL = "gpt:layers=8,hidden=256,heads=4,vocab=2048,seq=64"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--vary", default="hidden")
    ap.add_argument("--low", type=int, default=192)
    ap.add_argument("--high", type=int, default=320)
    ap.add_argument("--step", type=int, default=16)
    ap.add_argument("--capacity", default="40MiB")
    ap.add_argument("--json", type=Path, default=None, help="write the raw numbers here")
    args = ap.parse_args(argv)

    from mcap.cli.args import parse_bytes
    from mcap.core.press import joint
    from mcap.core.recommend import recommend
    from mcap.core.types import Setup
    from mcap.models import count_parameters
    from mcap.runner import open_runner
    from mcap.store import open_store
    from mcap.workflow import profiling, scaling

    cap = parse_bytes(args.capacity)
    setup = Setup(stages=4, batch_size=8, chunks=4, checkpoint="never", capacity_bytes=cap)
    grid = scaling.value_grid(args.model, args.vary, args.low, args.high, args.step)
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcap-pressscale-") as scratch:
        store = open_store(Path(scratch) / "store.sqlite")
        result = scaling.scale_press(args.model, args.vary, grid, setup, store=store,
                                     stream=sys.stderr)
        unbounded = dataclasses.replace(setup, capacity_bytes=None)
        for pt in sorted(result.points, key=lambda p: p.value):
            prof = profiling.profile(profiling.ProfileRequest(pt.spec, unbounded, press=True), store=store).profile
            alone = recommend(prof, setup.stages, "exact")
            plan = joint(prof, setup.stages, cap).plan if pt.balance else None
            with open_runner(pt.spec, setup) as runner:
                run_alone = runner.measure(alone.balance)
                run_plan = runner.measure(plan.balance, press=plan) if plan else None
            rows.append({
                "value": pt.value, "spec": pt.spec, "params": count_parameters(pt.spec),
                "alone_balance": list(alone.balance), "alone_predicted": int(alone.predicted_peak),
                "alone_status": run_alone.status,
                "alone_measured": None if run_alone.peaks is None else max(run_alone.peaks),
                "floor": pt.floor,
                "plan_balance": None if plan is None else list(plan.balance),
                "plan_predicted": None if plan is None else max(plan.predicted_peaks),
                "plan_added": None if plan is None else plan.predicted_added_seconds,
                "plan_status": None if run_plan is None else run_plan.status,
                "plan_measured": None if run_plan is None or run_plan.peaks is None
                else max(run_plan.peaks),
                "plan_error": None if run_plan is None else run_plan.error,
            })
        store.close()
    out = {"model": args.model, "vary": args.vary, "capacity": cap,
           "largest_alone_predicted": result.largest_alone,
           "largest_press_predicted": result.largest_press, "rows": rows,
           "seconds": time.monotonic() - t0}
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    report(out)
    return 0


def report(out: dict) -> None:
    mib = lambda n: "-" if n is None else f"{n / 2**20:.2f}"  # noqa: E731
    print(f"{out['model']} varying {out['vary']} under {mib(out['capacity'])} MiB per device "
          f"({out['seconds'] / 60:.1f} min)")
    print(f"| {out['vary']} | parameters | alone: pick, predicted / measured MiB | "
          "floor MiB | with a plan: pick, predicted / measured MiB, added s |")
    print("|---|---|---|---|---|")
    for r in out["rows"]:
        alone = (f"{','.join(map(str, r['alone_balance']))}, {mib(r['alone_predicted'])} / "
                 f"{mib(r['alone_measured']) if r['alone_status'] == 'ok' else r['alone_status']}")
        plan = "no plan fits" if r["plan_balance"] is None else (
            f"{','.join(map(str, r['plan_balance']))}, {mib(r['plan_predicted'])} / "
            f"{mib(r['plan_measured']) if r['plan_status'] == 'ok' else r['plan_status']}, "
            f"+{r['plan_added']:.4f}")
        print(f"| {r['value']} | {r['params']:,} | {alone} | {mib(r['floor'])} | {plan} |")
    ok_alone = [r for r in out["rows"] if r["alone_status"] == "ok"]
    ok_plan = [r for r in out["rows"] if r["plan_status"] == "ok"]
    la = max(ok_alone, key=lambda r: r["value"], default=None)
    lp = max(ok_plan + ok_alone, key=lambda r: r["value"], default=None)
    print(f"predicted: largest alone {out['vary']}={out['largest_alone_predicted']}, "
          f"with a plan {out['vary']}={out['largest_press_predicted']}")
    if la and lp:
        print(f"measured under the capacity: largest alone {out['vary']}={la['value']} "
              f"({la['params']:,} parameters), with a plan {out['vary']}={lp['value']} "
              f"({lp['params']:,}): {lp['params'] / la['params']:.2f}x trainable parameters")


if __name__ == "__main__":
    sys.exit(main())
