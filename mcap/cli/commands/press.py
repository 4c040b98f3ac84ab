"""``press``: MPress's memory-saving plan for one partitioning (MPress II-III, issue 16).

    python -m mcap press --profile P --balance 3,3,5,19 --capacity 512MiB \\
        [--method mpress|milp] [--predictor NAME] [--measure-base] [--out plan.json] [--json]

Prints per stage and layer what happens to its saved activations (keep, recompute, swap,
d2d with its target stage), every stage's predicted peak after the plan and the predicted
added time per iteration (``mcap.core.press``). ``--out`` writes the ``mcap.press/1`` file
that ``measure --press`` runs; the path is checked before any work. A capacity no plan can
meet exits 2 naming the smallest capacity that can be met. ``--measure-base`` first runs the
partitioning with every layer kept (a real run on this machine, the profile's setup) and
plans from its measured per-stage peaks instead of predicted ones; only then is torch
imported.
"""
from __future__ import annotations

import json

from mcap.cli import args as argtypes
from mcap.cli.options import add_predictor_option
from mcap.core.units import fmt_bytes


def register(sub) -> None:
    from mcap.core.press import get, names
    p = sub.add_parser("press", help="plan recompute / host swap / device-to-device swap so "
                                     "every stage fits a capacity (MPress)")
    p.add_argument("--profile", required=True, type=argtypes.in_path, help="a mcap.profile/1 JSON file with MPress "
                   "statistics (profile --checkpoint never --press)")
    p.add_argument("--balance", required=True, help="layer counts per stage, e.g. 3,3,5,19")
    p.add_argument("--capacity", type=argtypes.parse_bytes, required=True, metavar="BYTES",
                   help="memory per device: bytes or a unit (512MiB, 1.5GB)")
    p.add_argument("--method", choices=names(), default=names()[0],
                   help="; ".join(f"{n}: {get(n).help}" for n in names()))
    add_predictor_option(p)
    p.add_argument("--measure-base", action="store_true",
                   help="measure the partitioning with every layer kept first (one real run "
                        "here, the profile's setup) and plan from its per-stage peaks, not "
                        "from predicted ones")
    p.add_argument("--out", type=argtypes.out_path, default=None, metavar="PLAN.json",
                   help="write the mcap.press/1 plan here (checked first; only an existing "
                        "mcap.press/1 file is replaced)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_press)


def plan_json(plan, base_peaks, base: str = "predicted") -> dict:
    """The ``--json`` answer: the contract keys plus the keep-all peaks for comparison
    (``base``: whether they were predicted or measured)."""
    from mcap.core.press.actions import plan_to_json
    d = plan_to_json(plan)
    return {"balance": d["balance"], "capacity_bytes": d["capacity_bytes"],
            "method": d["method"], "plan": d["plan"],
            "predicted_peaks": d["predicted_peaks"], "predicted_peak": max(d["predicted_peaks"]),
            "predicted_added_seconds": d["predicted_added_seconds"],
            "peaks_before": [int(b) for b in base_peaks], "base": base,
            "counts": plan.counts()}


def print_plan(plan, base_peaks) -> None:
    print(f"press {plan.method}: balance {','.join(map(str, plan.balance))} under "
          f"{fmt_bytes(plan.capacity_bytes)} ({plan.capacity_bytes} bytes): predicted added "
          f"time {plan.predicted_added_seconds:.4f} s per iteration")
    print("stage  before          after           plan")
    for s, (b, a, acts) in enumerate(zip(base_peaks, plan.predicted_peaks, plan.stages)):
        words = " ".join("." if x.action == "keep" else
                         (f"d{x.target}" if x.action == "d2d" else x.action[0]) for x in acts)
        print(f"{s:>5}  {fmt_bytes(b):>14}  {fmt_bytes(a):>14}  {words}")
    print("(per layer: . keep, r recompute, s swap to host, dN d2d to stage N)")


def cmd_press(args) -> int:
    from mcap.core.partition import parse_balance
    from mcap.core.press import problem, solve
    from mcap.io.jsonio import load_profile
    from mcap.io.outputs import check_out

    from mcap.core.press.actions import PRESS_SCHEMA
    from mcap.store.opening import default_store_path
    if args.out is not None:  # before any work
        check_out(args.out, PRESS_SCHEMA, inputs=(args.profile,), store=default_store_path())
    profile = load_profile(args.profile)
    balance = parse_balance(args.balance)
    base = None
    if args.measure_base:
        import sys
        from mcap.core.partition import validate
        from mcap.core.press.problems import check_profile
        from mcap.workflow.press import keep_all_peaks
        check_profile(profile)  # the refusals a plan would give, before any run
        validate(balance, profile.model.num_layers)
        base, warning = keep_all_peaks(profile, balance)
        if warning:
            print(f"mcap: warning: {warning}", file=sys.stderr)
    p = problem(profile, balance, args.capacity, args.predictor, base=base)
    plan = solve(p, args.capacity, args.method)
    if args.out is not None:
        from mcap.io.pressfile import save
        check_out(args.out, PRESS_SCHEMA, inputs=(args.profile,),
                  store=default_store_path())  # again, right before the write
        save(plan, args.out)
    if args.json:
        print(json.dumps(plan_json(plan, p.base, "measured" if base else "predicted")))
    else:
        print_plan(plan, p.base)
        if base:
            print("(before: measured now with every layer kept)")
        if args.out is not None:
            print(f"wrote {args.out}")
    return 0


# --- recommend --capacity C --press (partitioning + plan) --------------------------------

def add_joint_options(p) -> None:
    from mcap.core.press import names
    p.add_argument("--capacity", type=argtypes.parse_bytes, default=None, metavar="BYTES",
                   help="memory per device (with --press): bytes or a unit (512MiB)")
    p.add_argument("--press", action="store_true",
                   help="search partitionings and MPress plans together and return the "
                        "fastest that fits --capacity (needs a profile with press statistics)")
    p.add_argument("--press-method", choices=names(), default="milp",
                   help="the plan of each candidate partitioning (default milp, exact)")
    from mcap.core.press.jointsearch import MAX_TOP
    p.add_argument("--press-candidates", default=4,
                   type=argtypes.bounded_int(MAX_TOP, "--press-candidates",
                                             "each candidate is planned, an MILP each"),
                   help=f"partitionings planned: this many by lowest peak and by lowest "
                        f"floor (default 4 each, at most {MAX_TOP})")


def cmd_joint(args) -> int:
    from mcap.core.errors import McapError
    from mcap.core.press import joint
    from mcap.io.jsonio import load_profile

    if getattr(args, "mesh", None) is not None:
        raise McapError(f"recommend --press plans a pipeline over --stages G; --mesh {args.mesh} "
                        "(hybrid plans) has no MPress plan")
    if args.stages is None:
        raise McapError("recommend --press needs --stages G")
    if not args.press:
        raise McapError(f"recommend --capacity {args.capacity}: the lowest-peak partitioning "
                        "does not depend on a capacity; add --press to fit it with an MPress plan")
    if args.capacity is None:
        raise McapError("recommend --press needs --capacity BYTES: a plan saves memory to fit "
                        "a capacity")
    from mcap.core.search import DEFAULT
    if args.method not in (None, DEFAULT):
        raise McapError(f"recommend --press ranks partitionings itself (by predicted peak and "
                        f"floor); drop --method {args.method}")
    profile = argtypes.allow_model(load_profile(args.profile), args.model)
    j = joint(profile, args.stages, args.capacity, args.press_method, args.predictor,
              args.press_candidates)
    if args.json:
        d = plan_json(j.plan, j.peaks_before)
        d.update(method="press", press_method=j.plan.method, predictor=args.predictor,
                 candidates=[{"balance": list(c.balance), "peak_before": c.peak_before,
                              "smallest_capacity": c.floor, "added_seconds": c.added_seconds}
                             for c in j.candidates])
        print(json.dumps(d))
        return 0
    print_plan(j.plan, j.peaks_before)
    print(f"{len(j.candidates)} partitionings planned:")
    for c in j.candidates:
        added = "does not fit" if c.added_seconds is None else f"+{c.added_seconds:.4f} s"
        print(f"  {','.join(map(str, c.balance)):<16} keep-all {fmt_bytes(c.peak_before):>12}  "
              f"floor {fmt_bytes(c.floor):>12}  {added}")
    return 0


# --- scale --press ---------------------------------------------------------------------

def cmd_scale_press(args, setup) -> int:
    import sys

    from mcap.core.errors import McapError
    from mcap.core.press import scale as pscale
    from mcap.store import Store
    from mcap.store.opening import resolve_path
    from mcap.workflow import measuring, scaling

    if args.out is not None:
        raise McapError("scale --press prints its result (--json); --out writes mcap.scale/1 "
                        "files of measured scaling only")
    grid = scaling.value_grid(args.model, args.vary, args.low, args.high, args.step)
    store = Store(resolve_path(args.store))
    try:
        with measuring.sigterm_cancels():
            result = scaling.scale_press(args.model, args.vary, grid, setup, store=store,
                                         timeout=args.timeout, stream=sys.stderr,
                                         predictor=args.predictor)
    except measuring.Cancelled:
        print("mcap: scale cancelled; finished runs are kept in the store", file=sys.stderr)
        return 143
    finally:
        store.close()
    print(json.dumps(pscale.to_dict(result)) if args.json else pscale.report(result))
    return 0
