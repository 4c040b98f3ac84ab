"""``python -m mcap measure --plan TEXT``: measure a hybrid plan for real (CAPTURE III, issue
15). Engine ``hybrid`` runs each device alone, rank by rank over the slots there are
(``--isolation stage``, the default), or one process per device together
(``--isolation pipeline``; ``mcap.runner.hybrid``); the JSON prints
``status`` and ``peaks`` (one per device, in stage order) as the issue's contract says, plus
``plan_text`` and ``plan``. Bad input exits 2 naming the values: a plan whose layers do not
sum to the model's, a micro-batch a data-parallel stage cannot split, another engine.
"""
from __future__ import annotations

import dataclasses
import json
import sys

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.hybrid import HybridPlan, check_micro_batches, check_plan, store_engine
from mcap.core.types import Run


def plan_setup(args, plan: HybridPlan):
    """The runner's setup for ``plan``: engine hybrid, one "stage" process per device."""
    from mcap.cli.profile import setup_from_args

    if args.engine not in ("auto", "hybrid"):
        raise McapError(f"--plan {plan.text} runs on engine hybrid, not --engine {args.engine}")
    if args.stages is not None and args.stages != plan.devices:
        raise InvalidPartitioning(f"plan {plan.text} uses {plan.devices} devices but --stages "
                                  f"is {args.stages}")
    args.stages, args.engine = plan.devices, "hybrid"
    setup = setup_from_args(args)
    check_micro_batches(plan, setup.batch_size, setup.chunks)
    return setup


def stored_run(plan: HybridPlan, run: Run) -> Run:
    """The record of a hybrid run in its ``hybrid:<layout>`` study: one peak per stage,
    the highest of the stage's devices (a study's runs have one peak per stage)."""
    peaks = None
    if run.peaks is not None:
        stage_of = plan.device_stage()
        peaks = tuple(max(p for d, p in enumerate(run.peaks) if stage_of[d] == s)
                      for s in range(len(plan.stages)))
    return dataclasses.replace(run, balance=plan.balance, peaks=peaks, breakdown=None)


def plan_json(plan: HybridPlan, run: Run) -> dict:
    from mcap.cli.run import run_json
    out = run_json(run)
    out.update(plan_text=plan.text, plan=plan.as_json(), devices=plan.devices)
    return out


def cmd_measure_plan(args) -> int:
    from mcap.cli.profile import isolation_env
    from mcap.cli.run import keep_measured
    from mcap.models.spec import parse_spec
    from mcap.runner import open_runner
    from mcap.store import Store
    from mcap.workflow.profiling import Cancelled, job_status, model_info, sigterm_cancels

    plan: HybridPlan = args.plan
    parse_spec(args.model)
    setup = plan_setup(args, plan)
    check_plan(plan, model_info(args.model).num_layers)  # before any process starts
    store = Store(args.store)
    try:
        # --isolation: each device alone (the default) or all of them together
        with sigterm_cancels(), job_status(store, args.job, total=1), \
                isolation_env(getattr(args, "isolation", None)):
            if args.job is not None:
                store.update_job(args.job, current=plan.balance)
            with open_runner(args.model, setup, timeout=args.timeout) as runner:
                info, machine = runner.model_info, runner.machine
                run = runner.measure_plan(plan)
            study_setup = dataclasses.replace(setup, stages=len(plan.stages),
                                              engine=store_engine(plan))
            unsaved = keep_measured(store, lambda: store.keep_run(
                info, study_setup, stored_run(plan, run), kind="measure", job=args.job,
                machine=machine), lambda: _print(args, plan, run))
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


def _print(args, plan: HybridPlan, run: Run) -> None:
    if args.json:
        print(json.dumps(plan_json(plan, run)))
    else:
        print(f"{run.status}: plan {plan.text} on {plan.devices} devices in {run.seconds:.2f} s")
        if run.peaks:
            stage_of = plan.device_stage()
            for d, peak in enumerate(run.peaks):
                s = plan.stages[stage_of[d]]
                print(f"  device {d} (stage {stage_of[d]}, {s.text}): peak {peak} bytes "
                      f"({peak / 2**20:.2f} MiB)")
        if run.error:
            print(f"  {run.error}", file=sys.stderr)


__all__ = ["cmd_measure_plan", "plan_json", "plan_setup", "stored_run"]
