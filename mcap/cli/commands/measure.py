"""``python -m mcap measure``: measure one partitioning for real (issue 4, Runner).

    python -m mcap measure --model vgg11:image_size=32 --balance 3,3,5,19 --batch-size 8 --json
    python -m mcap measure --model gpt:layers=4 --plan 2,2:dp2,2:tp2 --batch-size 8 --json

The number of stages is the length of ``--balance``. ``--plan`` measures a CAPTURE plan
(section III, issue 15) on engine hybrid, one process per device: each device alone, rank
by rank over the slots there are (``--isolation stage``, the default), or all together
(``--isolation pipeline``; ``mcap.runner.capture``). Its JSON's ``peaks`` are per device,
in stage order, and ``plan_text`` / ``plan`` name the stages. The run is recorded in the
store (kind "measure") whatever its status; an oom or failed run exits 1, bad input exits 2.
A plan's run is recorded in the study of engine ``hybrid:<layout>``
(``mcap.core.capture.plan.store_engine``) with one peak per stage (the highest of its devices),
never in a pipeline-only study.

``--press PLAN.json`` applies an MPress plan (``mcap.press/1``; ``mcap.runner.press.apply``) and
needs ``--checkpoint never``; a plan of another model or balance exits 2 naming both. Its
run is stored under a setup that names the plan (``Setup.press``), so it is never reused
as a plain run of that balance. ``--json`` adds ``press`` (the plan file, its action counts
and code) to the usual status, peaks, seconds and samples_per_second.
"""
from __future__ import annotations

import dataclasses
import json
import sys
from mcap.cli import args as argtypes
from mcap.cli.options import (
    add_node_options, add_setup_options, executor_env, isolation_env, parse_balance,
    parse_plan_arg,
    plan_setup, setup_from_args,
)
from mcap.cli.output import keep_measured, mib, plan_json, run_json
from mcap.core.errors import InvalidPartitioning, McapError


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
    p.add_argument("--press", type=argtypes.in_path, default=None, metavar="PLAN.json",
                   help="apply an MPress plan (mcap.press/1, from python -m mcap press --out) of this "
                        "model and balance: per layer keep, recompute, host swap or d2d swap; "
                        "needs --checkpoint never. The run is stored apart from plain runs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_node_options(p)
    for action in p._actions:  # --stages is implied by --balance here
        if action.dest == "stages":
            action.required, action.default = False, None
    p.set_defaults(func=cmd_measure)


def cmd_measure(args) -> int:
    from mcap.models.spec import parse_spec

    if args.press is not None and (args.plan is not None or args.nnodes is not None):
        raise McapError("--press applies an MPress plan to a --balance on this machine; it "
                        "does not combine with --plan or --nnodes")
    if args.nnodes is not None:  # through torchrun, across nodes (mcap.cli.nodes)
        from mcap.cli.nodes import launch_measure
        return launch_measure(args, args.plan.devices if args.plan is not None
                              else len(args.balance))
    if args.plan is not None:
        return _measure_plan(args)
    balance = args.balance
    from mcap.cli.options import virtual_of
    v = virtual_of(args)  # stages per rank: a balance has G x V entries
    if args.stages is not None and args.stages * v != len(balance):
        raise InvalidPartitioning(
            f"balance {','.join(map(str, balance))} has {len(balance)} stages but --stages "
            f"is {args.stages}" + (f" with {v} virtual stages per rank ({args.stages * v})"
                                   if v > 1 else ""))
    if len(balance) % v:
        raise InvalidPartitioning(f"balance {','.join(map(str, balance))} has {len(balance)} "
                                  f"stages, not a multiple of --virtual-stages {v}")
    args.stages = len(balance) // v
    parse_spec(args.model)
    setup = setup_from_args(args)
    from mcap.workflow.measuring import model_info
    model_info(args.model, setup)  # a layer no device can hold exits 2 before any process
    plan = None
    if args.press is not None:  # checked before any process starts (exit 2 naming values)
        from mcap.io.pressfile import load as load_plan
        from mcap.runner.press.check import check_plan
        plan = load_plan(args.press)
        check_plan(plan, args.model, setup, balance)
    # A plan that moves activations into a peer stage (d2d) needs the stages together.
    isolation = args.isolation
    if plan is not None and isolation is None and \
            any(a.action == "d2d" for stage in plan.stages for a in stage):
        isolation = "pipeline"

    def stored(run):
        # A plan's run is a study of its own (Setup.press): never reused as a plain run.
        from mcap.core.setup import press_code
        return (setup if plan is None else dataclasses.replace(setup, press=press_code(plan))), run
    return _measure_and_keep(args, setup, balance, isolation,
                             lambda runner: runner.measure(balance, press=plan), stored,
                             lambda run, link=None: print_run(args, run, plan, link))


def _measure_plan(args) -> int:
    """``measure --plan``: a CAPTURE plan on engine hybrid, stored in its own study."""
    from mcap.core.capture.plan import check_plan, store_engine, stored_run
    from mcap.models.spec import parse_spec
    from mcap.workflow.measuring import model_info

    plan = args.plan
    parse_spec(args.model)
    setup = plan_setup(args, plan)
    check_plan(plan, model_info(args.model).num_layers)  # before any process starts
    study_setup = dataclasses.replace(setup, stages=len(plan.stages), engine=store_engine(plan))
    # --isolation: each device alone (the default) or all of them together
    return _measure_and_keep(args, setup, plan.balance, getattr(args, "isolation", None),
                             lambda runner: runner.measure_plan(plan),
                             lambda run: (study_setup, stored_run(plan, run)),
                             lambda run, link=None: _print_plan(args, plan, run))


def _measure_and_keep(args, setup, current, isolation, measure, stored, show) -> int:
    """One measurement of ``measure(runner)`` in the store's job and the run's isolation,
    kept as ``stored(run) -> (setup, run)`` and printed by ``show(run, link)`` (``link``:
    what an estimated throughput was replayed over, or None): exit 0 (ok), 1
    (oom or failed), 143 (cancelled), or the store's refusal (exit 2) after the print.

    A dashboard job (--job ID, mcap.app.jobs.launch) sees running -> done/failed/cancelled,
    what is being measured, and the run linked to it, as profile and sweep report."""
    from mcap.runner import open_runner
    from mcap.store import Store
    from mcap.workflow.measuring import Cancelled, job_status, sigterm_cancels

    store = Store(args.store)
    try:
        with sigterm_cancels(), job_status(store, args.job, total=1), \
                isolation_env(isolation), executor_env(args):
            if args.job is not None:
                store.update_job(args.job, current=current)
            with open_runner(args.model, setup, timeout=args.timeout) as runner:
                info, machine = runner.model_info, runner.machine
                run = measure(runner)
                link = getattr(runner, "estimate_link", None) if run.estimated else None
            keyed, kept = stored(run)
            # A busy store is waited for, and a run it still refuses is kept in its recovery
            # file: the result is printed either way, before the error (issue 28).
            unsaved = keep_measured(store, lambda: store.keep_run(
                info, keyed, kept, kind="measure", job=args.job, machine=machine),
                lambda: show(run, link))
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


def print_run(args, run, plan, link=None) -> None:
    """The run as text or ``--json``; ``link``: the one an estimated throughput was
    replayed over (``mcap.core.stagetime``), named in both."""
    from mcap.core import stagetime
    from mcap.core.setup import press_code
    if args.json:
        out = run_json(run)
        if link is not None:
            out[stagetime.KEY] = stagetime.link_to_json(link)
        if plan is not None:
            out["press"] = {"plan": str(args.press), "actions": plan.counts(),
                            "code": press_code(plan)}
        print(json.dumps(out))
    else:
        print(f"{run.status}: balance {','.join(map(str, run.balance))} in {run.seconds:.2f} s")
        if run.peaks:
            for i, peak in enumerate(run.peaks):
                print(f"  stage {i}: peak {peak} bytes ({mib(peak)})")
            how = ("estimated from the stages' own times" + (
                f" over {stagetime.describe(link)}" if link is not None else "")
                   if run.estimated else "timed on the stages running together")
            rate = (f"{run.samples_per_second:.1f} samples/s ({how})"
                    if run.samples_per_second else "throughput not known")
            print(f"  peak {run.peak} bytes ({mib(run.peak)}), {rate}")
        if run.error:
            print(f"  {run.error}", file=sys.stderr)


def _print_plan(args, plan, run) -> None:
    if args.json:
        print(json.dumps(plan_json(plan, run)))
    else:
        print(f"{run.status}: plan {plan.text} on {plan.devices} devices in {run.seconds:.2f} s")
        if run.peaks:
            stage_of = plan.device_stage()
            for d, peak in enumerate(run.peaks):
                s = plan.stages[stage_of[d]]
                print(f"  device {d} (stage {stage_of[d]}, {s.text}): peak {peak} bytes "
                      f"({mib(peak)})")
        if run.error:
            print(f"  {run.error}", file=sys.stderr)


__all__ = ["register", "cmd_measure", "print_run"]
