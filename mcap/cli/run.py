"""``python -m mcap measure``: measure one partitioning for real (issue 4, Runner).

    python -m mcap measure --model vgg11:image_size=32 --balance 3,3,5,19 --batch-size 8 --json
    python -m mcap measure --model gpt:layers=4 --plan 2,2:dp2,2:tp2 --batch-size 8 --json

The number of stages is the length of ``--balance``. ``--plan`` measures a hybrid plan
(CAPTURE III) on engine hybrid, one process per device: its JSON's ``peaks`` are per device,
in stage order, and ``plan`` names the stages. The run is recorded in the store (kind
"measure") whatever its status; an oom or failed run exits 1, bad input exits 2. A plan's
run is recorded in the study of engine ``hybrid:<layout>`` (``mcap.core.hybrid.store_engine``)
with one peak per stage (the highest of its devices), never in a pipeline-only study.
"""
from __future__ import annotations

import argparse
import json
import sys

from mcap.cli.profile import add_setup_options, setup_from_args
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
    # A dashboard job (--job ID, mcap.app.jobs.launch) sees running -> done/failed/cancelled,
    # the balance being measured, and the run linked to it, as profile and sweep report.
    store = Store(args.store)
    try:
        with sigterm_cancels(), job_status(store, args.job, total=1):
            if args.job is not None:
                store.update_job(args.job, current=balance)
            with open_runner(args.model, setup, timeout=args.timeout) as runner:
                info, machine = runner.model_info, runner.machine
                run = runner.measure(balance)
            store.record_run(store.study(info, setup), run, kind="measure", job=args.job,
                             machine=machine)
            if args.job is not None:
                store.update_job(args.job, done=1)
    except Cancelled:
        print("mcap: measure cancelled", file=sys.stderr)
        return 143
    finally:
        store.close()
    if args.json:
        print(json.dumps(run_json(run)))
    else:
        print(f"{run.status}: balance {','.join(map(str, run.balance))} in {run.seconds:.2f} s")
        if run.peaks:
            for i, peak in enumerate(run.peaks):
                print(f"  stage {i}: peak {peak} bytes ({_mib(peak)})")
            print(f"  peak {run.peak} bytes ({_mib(run.peak)}), "
                  f"{run.samples_per_second:.1f} samples/s")
        if run.error:
            print(f"  {run.error}", file=sys.stderr)
    return 0 if run.status == "ok" else 1


__all__ = ["register", "cmd_measure", "parse_balance", "parse_plan_arg", "run_json"]
