"""Core commands: ``plan``, ``predict``, ``recommend`` (issue 3, CLI).

    python -m mcap plan --layers 30 --stages 4 [--scheme mcap|capture] [--json]
    python -m mcap predict --profile FILE --balance 3,3,5,19 [--json]
    python -m mcap recommend --profile FILE --stages 4 --method exact [--seed S] [--json]

Without ``--json`` they print a small table. Bad input raises McapError, which
``mcap.cli.main`` turns into one line and exit code 2. None of these import torch, except
``recommend --method time``, which loads ``mcap.runner.timebalance`` lazily.
"""
from __future__ import annotations

import argparse
import dataclasses
import json

from mcap.cli import args as argtypes
from mcap.core.errors import McapError
from mcap.core.partition import parse_balance

METHOD_CHOICES = ("exact", "bf", "bo", "uniform", "params", "time")


def _fmt_bytes(n: int) -> str:
    """Human-readable bytes for tables; JSON output always carries int bytes."""
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.2f} {unit}"
        v /= 1024
    return f"{n} B"


def _positive_int(text: str) -> int:
    return argtypes.positive_int(text)


def _trusted_model(text: str):
    from mcap.models.spec import trusted_model_arg
    return trusted_model_arg(text)


def register(sub) -> None:
    p = sub.add_parser("plan", help="print the profiling partitionings for L layers on G stages")
    p.add_argument("--layers", type=_positive_int, required=True, help="number of layers L")
    p.add_argument("--stages", type=_positive_int, required=True, help="number of devices G")
    p.add_argument("--scheme", choices=("mcap", "capture"), default="mcap")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("predict", help="predict a partitioning's per-stage peaks from a profile")
    p.add_argument("--profile", required=True, help="a mcap.profile/1 JSON file")
    p.add_argument("--balance", required=True, help="layer counts per stage, e.g. 3,3,5,19")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("recommend", help="recommend the partitioning with the lowest predicted peak")
    p.add_argument("--profile", required=True, help="a mcap.profile/1 JSON file")
    p.add_argument("--stages", type=_positive_int, required=True, help="number of devices G")
    p.add_argument("--method", choices=METHOD_CHOICES, default="exact")
    p.add_argument("--seed", type=argtypes.seed, default=0, help="seed for bo")
    p.add_argument("--iterations", type=argtypes.positive_int, default=75,
                   help="bo evaluations (paper: 75)")
    p.add_argument("--tie-tolerance", type=argtypes.tolerance, default=0.0,
                   help="relative band above the lowest peak treated as a tie, 0..1 (default 0)")
    p.add_argument("--model", type=_trusted_model, default=None, metavar="SPEC",
                   help="for --method time on a profile of a user model (package.module:function): "
                        "type the profile's spec here to allow running that code; mcap never "
                        "runs code because a file names it")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_recommend)


def cmd_plan(args) -> int:
    from mcap.core.plan import profiling_plan

    plan = profiling_plan(args.layers, args.stages, args.scheme)
    if args.json:
        print(json.dumps({"layers": plan.num_layers, "stages": plan.stages, "scheme": plan.scheme,
                          "runs": [list(r) for r in plan.runs],
                          "mem_isolated_from": [list(w) if w else None for w in plan.sources.isolated],
                          "mem_added_n": list(plan.sources.added)}))
        return 0
    print(f"{len(plan.runs)} profiling runs for {plan.num_layers} layers on {plan.stages} stages "
          f"(scheme {plan.scheme}; the paper's count is L-G+1 = {plan.num_layers - plan.stages + 1})")
    width = len(str(len(plan.runs)))
    for i, r in enumerate(plan.runs, 1):
        print(f"{i:>{width}}  {','.join(map(str, r))}")
    return 0


def cmd_predict(args) -> int:
    from mcap.io.jsonio import load_profile
    from mcap.core.predict import predict

    profile = load_profile(args.profile)
    pred = predict(profile.stats, parse_balance(args.balance))
    if args.json:
        print(json.dumps({"predicted_peaks": list(pred.peaks), "predicted_peak": pred.peak}))
        return 0
    print(f"balance {','.join(map(str, pred.balance))}: predicted peak {_fmt_bytes(pred.peak)} "
          f"({pred.peak} bytes)")
    print("stage  layers     predicted peak")
    for i, ((a, z), p) in enumerate(zip(_bounds(pred.balance), pred.peaks)):
        print(f"{i:>5}  {a:>3}..{z:<4}  {_fmt_bytes(p):>14}")
    return 0


def _bounds(balance):
    out, s = [], 0
    for n in balance:
        out.append((s, s + n - 1))
        s += n
    return out


def _time_method(profile, stages: int):
    try:
        from mcap.runner.timebalance import recommend_time
    except ImportError as exc:
        raise McapError(f"method 'time' needs torch and torchgpipe, which cannot be imported here: {exc}") \
            from None
    staged = dataclasses.replace(profile, setup=dataclasses.replace(profile.setup, stages=stages))
    return recommend_time(staged)


def cmd_recommend(args) -> int:
    from mcap.io.jsonio import load_profile
    from mcap.core.search import recommend

    profile = load_profile(args.profile)
    if args.method == "time":
        from mcap.core.predict import check_stats
        check_stats(profile.stats)
        if args.stages < 1 or args.stages > profile.model.num_layers:
            raise McapError(f"stages must be between 1 and {profile.model.num_layers}, got {args.stages}")
        rec = _time_method(argtypes.allow_model(profile, args.model), args.stages)
    else:
        rec = recommend(profile.stats, args.stages, args.method,
                        layer_params=[l.param_bytes for l in profile.model.layers],
                        tie_tolerance=args.tie_tolerance, seed=args.seed, iterations=args.iterations)
    if args.json:
        print(json.dumps({"method": rec.method, "balance": list(rec.balance),
                          "predicted_peaks": list(rec.predicted_peaks), "predicted_peak": rec.predicted_peak,
                          "seconds": rec.seconds, "evaluated": rec.evaluated}))
        return 0
    print(f"method {rec.method}: balance {','.join(map(str, rec.balance))}, predicted peak "
          f"{_fmt_bytes(rec.predicted_peak)} ({rec.predicted_peak} bytes); searched {rec.evaluated} "
          f"candidates in {rec.seconds:.3f} s")
    print("stage  layers     predicted peak")
    for i, ((a, z), p) in enumerate(zip(_bounds(rec.balance), rec.predicted_peaks)):
        print(f"{i:>5}  {a:>3}..{z:<4}  {_fmt_bytes(p):>14}")
    return 0
