"""``python -m mcap measure``: measure one partitioning for real (issue 4, Runner).

    python -m mcap measure --model vgg11:image_size=32 --balance 3,3,5,19 --batch-size 8 --json
    python -m mcap measure --model gpt:layers=4 --plan 2,2:dp2,2:tp2 --batch-size 8 --json

The number of stages is the length of ``--balance``. ``--plan`` measures a hybrid plan
(CAPTURE III) on engine hybrid, one process per device: its JSON's ``peaks`` are per device,
in stage order, and ``plan`` names the stages. The run is recorded in the store (kind
"measure") whatever its status; an oom or failed run exits 1, bad input exits 2. A plan's
run is recorded in the study of engine ``hybrid:<layout>`` (``mcap.core.hybrid.store_engine``)
with one peak per stage (the highest of its devices), never in a pipeline-only study.

``--press PLAN.json`` applies an MPress plan (``mcap.press/1``; ``mcap.runner.press``) and
needs ``--checkpoint never``; a plan of another model or balance exits 2 naming both. Its
run is stored under a setup that names the plan (``Setup.press``), so it is never reused
as a plain run of that balance. ``--json`` adds ``press`` (the plan file, its action counts
and code) to the usual status, peaks, seconds and samples_per_second.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from mcap.cli.profile import add_setup_options, isolation_env, setup_from_args
from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.partition import parse_balance as core_parse_balance
from mcap.core.types import Run


def parse_balance(text: str) -> tuple[int, ...]:
    """``3,3,5,19`` -> (3, 3, 5, 19); argparse shows the core's message on bad text."""
    try:
        return core_parse_balance(text)
    except McapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_plan_arg(text: str):
    """``3,3,10:tp2`` -> HybridPlan; argparse shows the core's message on bad text."""
    from mcap.core.hybrid import parse_plan
    try:
        return parse_plan(text)
    except McapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(sub) -> None:
    p = sub.add_parser("measure", help="measure one partitioning with real stage processes",
                       description="Train the model split by --balance for 2 iterations and "
                                   "print each stage's peak memory; records the run.")
    add_setup_options(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--balance", type=parse_balance, metavar="N,N,...",
                       help="layers per stage, e.g. 3,3,5,19 (its length is the number of "
                            "stages): a pipeline-only plan")
    which.add_argument("--plan", type=parse_plan_arg, metavar="PLAN",
                       help="a hybrid plan, e.g. 3,3,10:tp2 (N layers on one device, N:dpK / "
                            "N:tpK on K devices with data / tensor parallelism), run on engine "
                            "hybrid with one process per device")
    p.add_argument("--press", type=Path, default=None, metavar="PLAN.json",
                   help="apply an MPress plan (mcap.press/1, from python -m mcap press --out) of this "
                        "model and balance: per layer keep, recompute, host swap or d2d swap; "
                        "needs --checkpoint never. The run is stored apart from plain runs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    from mcap.cli.nodes import add_node_options
    add_node_options(p)
    for action in p._actions:  # --stages is implied by --balance here
        if action.dest == "stages":
            action.required, action.default = False, None
    p.set_defaults(func=cmd_measure)


def run_json(run: Run) -> dict:
    """What ``measure`` prints: status, per-stage peaks (bytes), the worst, timing."""
    out = {"balance": list(run.balance), "status": run.status,
           "peaks": list(run.peaks) if run.peaks else None, "peak": run.peak,
           "seconds": round(run.seconds, 3),
           "samples_per_second": (round(run.samples_per_second, 3)
                                  if run.samples_per_second else None)}
    if run.estimated:
        out["samples_per_second_estimated"] = True
    if run.error:
        out["error"] = run.error
    if run.breakdown:
        out["breakdown"] = [{"weights": b.weights, "gradients": b.gradients,
                             "optimizer": b.optimizer, "other": b.other} for b in run.breakdown]
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def cmd_measure(args) -> int:
    from mcap.models.spec import parse_spec
    from mcap.workflow.profiling import Cancelled, job_status, sigterm_cancels
    from mcap.runner import open_runner
    from mcap.store import Store

    if args.press is not None and (args.plan is not None or args.nnodes is not None):
        raise McapError("--press applies an MPress plan to a --balance on this machine; it "
                        "does not combine with --plan or --nnodes")
    if args.nnodes is not None:  # through torchrun, across nodes (mcap.cli.nodes)
        from mcap.cli.nodes import launch_measure
        return launch_measure(args, args.plan.devices if args.plan is not None
                              else len(args.balance))
    if args.plan is not None:
        from mcap.cli.measure_plan import cmd_measure_plan
        return cmd_measure_plan(args)
    balance = args.balance
    if args.stages is not None and args.stages != len(balance):
        raise InvalidPartitioning(f"balance {','.join(map(str, balance))} has {len(balance)} "
                                  f"stages but --stages is {args.stages}")
    args.stages = len(balance)
    parse_spec(args.model)
    setup = setup_from_args(args)
    plan = None
    if args.press is not None:  # checked before any process starts (exit 2 naming values)
        from mcap.core.setup import press_code
        from mcap.io.pressfile import load as load_plan
        from mcap.runner.pressplans import check_plan
        plan = load_plan(args.press)
        check_plan(plan, args.model, setup, balance)
    # A dashboard job (--job ID, mcap.app.jobs.launch) sees running -> done/failed/cancelled,
    # the balance being measured, and the run linked to it, as profile and sweep report.
    # A plan that moves activations into a peer stage (d2d) needs the stages together.
    isolation = args.isolation
    if plan is not None and isolation is None and \
            any(a.action == "d2d" for stage in plan.stages for a in stage):
        isolation = "pipeline"
    store = Store(args.store)
    try:
        with sigterm_cancels(), job_status(store, args.job, total=1), \
                isolation_env(isolation):
            if args.job is not None:
                store.update_job(args.job, current=balance)
            with open_runner(args.model, setup, timeout=args.timeout) as runner:
                info, machine = runner.model_info, runner.machine
                run = runner.measure(balance, press=plan)
            # A plan's run is a study of its own (Setup.press): never reused as a plain run.
            keyed = setup if plan is None else dataclasses.replace(setup, press=press_code(plan))
            # A busy store is waited for, and a run it still refuses is kept in its recovery
            # file: the result is printed either way, before the error (issue 28).
            unsaved = keep_measured(store, lambda: store.keep_run(
                info, keyed, run, kind="measure", job=args.job, machine=machine),
                lambda: print_run(args, run, plan))
            if args.job is not None and unsaved is None:
                store.update_job(args.job, done=1)
    except Cancelled:
        print("mcap: measure cancelled", file=sys.stderr)
        return 143
    finally:
        store.close()
    if unsaved is not None:
        raise unsaved
    return 0 if run.status == "ok" else 1


def keep_measured(store, record, show):
    """``record()`` the measured run, then ``show()`` it; an McapError from the record (a
    StoreError: the run is then in the recovery file, named in it) is returned, after the
    result is shown, for the command to exit 2 with: a measured run is always printed."""
    try:
        record()
        unsaved = None
    except McapError as exc:
        unsaved = exc
    show()
    sys.stdout.flush()
    return unsaved


def print_run(args, run, plan) -> None:
    from mcap.core.setup import press_code
    if args.json:
        out = run_json(run)
        if plan is not None:
            out["press"] = {"plan": str(args.press), "actions": plan.counts(),
                            "code": press_code(plan)}
        print(json.dumps(out))
    else:
        print(f"{run.status}: balance {','.join(map(str, run.balance))} in {run.seconds:.2f} s")
        if run.peaks:
            for i, peak in enumerate(run.peaks):
                print(f"  stage {i}: peak {peak} bytes ({_mib(peak)})")
            how = ("estimated from the stages' own times" if run.estimated
                   else "timed on the stages running together")
            rate = (f"{run.samples_per_second:.1f} samples/s ({how})"
                    if run.samples_per_second else "throughput not known")
            print(f"  peak {run.peak} bytes ({_mib(run.peak)}), {rate}")
        if run.error:
            print(f"  {run.error}", file=sys.stderr)


__all__ = ["register", "cmd_measure", "keep_measured", "parse_balance", "parse_plan_arg",
           "print_run", "run_json"]
