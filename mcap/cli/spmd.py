"""One measurement under ``torchrun``, which can span nodes (issue 4, engine pipelining;
issue 15, engine hybrid with ``--plan``).

    torchrun --nnodes 2 --nproc-per-node 2 --rdzv-endpoint HOST:PORT \\
        -m mcap.cli.spmd --model vgg11:image_size=32 --balance 3,3,5,19 --device cuda

Every rank trains its stage exactly as a runner worker does (:func:`pipelining.run_stage`),
then rank 0 gathers the stage results and prints the run as ``python -m mcap measure
--json`` does. Stage i runs on rank i; on CUDA each rank uses GPU ``LOCAL_RANK``. Nothing is
recorded in a store (the ranks may share no file system). A stage that fails while the others
wait for it leaves them to the process group's timeout (``--timeout``).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
from datetime import timedelta

from mcap.core.errors import McapError


def main(argv: list[str] | None = None) -> int:
    from mcap.cli.options import add_setup_options, parse_balance, parse_plan_arg, setup_from_args
    from mcap.cli.output import run_json

    p = argparse.ArgumentParser(prog="python -m mcap.cli.spmd")
    add_setup_options(p)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--balance", type=parse_balance)
    which.add_argument("--plan", type=parse_plan_arg)
    p.add_argument("--json", action="store_true")  # accepted for symmetry; output is JSON
    for action in p._actions:
        if action.dest == "stages":  # implied by --balance
            action.required, action.default = False, None
    args = p.parse_args(argv)
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    if args.plan is not None:
        try:
            return _measure_plan(args, rank, world)
        except McapError as exc:
            print(f"mcap: error: {exc}", file=sys.stderr)
            return 2
    if world != len(args.balance):
        print(f"mcap: error: balance {','.join(map(str, args.balance))} has "
              f"{len(args.balance)} stages but torchrun started {world} ranks", file=sys.stderr)
        return 2
    args.stages = world
    try:
        return _measure(args, setup_from_args(args), rank, world, run_json)
    except McapError as exc:
        print(f"mcap: error: {exc}", file=sys.stderr)
        return 2


def _measure(args, setup, rank: int, world: int, run_json) -> int:
    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining  # noqa: F401  (import-time tensors stay uncounted)

    from mcap.runner import check_balance, check_setup, memtrack
    from mcap.runner.pipelining import build_resident, run_stage
    from mcap.runner.results import run_of

    check_setup(setup)
    from mcap.runner import engines
    engine = engines.get(setup.engine)
    if not engine.across_nodes or engine.plans:  # a plan is --plan (_measure_plan)
        print("mcap: error: under torchrun only engine pipelining runs", file=sys.stderr)
        return 2
    local = int(os.environ.get("LOCAL_RANK", rank))
    from mcap.runner.machine import pin_threads
    pin_threads(setup.threads)  # as the runner's stage processes are (Setup.threads)
    if setup.device == "cuda":
        torch.cuda.set_device(local)
    else:
        memtrack.install()
    dist.init_process_group("nccl" if setup.device == "cuda" else "gloo",
                            timeout=timedelta(seconds=args.timeout))
    try:
        resident, info = build_resident(args.model, setup)
        balance = check_balance(args.balance, world, info.num_layers)
        gc.collect()
        gc.freeze()
        start = time.monotonic()
        result = run_stage(resident, setup, balance, rank, local_device=local)
        results = [None] * world
        dist.all_gather_object(results, result)
        seconds = time.monotonic() - start
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0
    run = run_of(balance, results, seconds, setup)
    print(json.dumps(run_json(run)))
    return 0 if run.status == "ok" else 1


def _measure_plan(args, rank: int, world: int) -> int:
    """A hybrid plan (engine hybrid): rank d is device d of the plan (mcap.runner.capture.device)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining  # noqa: F401  (import-time tensors stay uncounted)

    from mcap.cli.options import plan_setup
    from mcap.cli.output import plan_json
    from mcap.core.capture.plan import check_plan
    from mcap.runner import check_setup, memtrack
    from mcap.runner.capture.device import run_device
    from mcap.runner.machine import pin_threads
    from mcap.runner.pipelining import build_resident
    from mcap.runner.results import run_of

    plan = args.plan
    if world != plan.devices:
        raise McapError(f"plan {plan.text} uses {plan.devices} devices but torchrun started "
                        f"{world} ranks")
    setup = plan_setup(args, plan)
    check_setup(setup)
    local = int(os.environ.get("LOCAL_RANK", rank))
    pin_threads(setup.threads)
    if setup.device == "cuda":
        torch.cuda.set_device(local)
    else:
        memtrack.install()
    dist.init_process_group("nccl" if setup.device == "cuda" else "gloo",
                            timeout=timedelta(seconds=args.timeout))
    try:
        resident, info = build_resident(args.model, setup)
        check_plan(plan, info.num_layers)
        gc.collect()
        gc.freeze()
        start = time.monotonic()
        result = run_device(resident, setup, plan, rank, {}, local_device=local)
        results = [None] * world
        dist.all_gather_object(results, result)
        seconds = time.monotonic() - start
    finally:
        dist.destroy_process_group()
    if rank != 0:
        return 0
    run = run_of(plan.balance, results, seconds, setup)
    out = plan_json(plan, run)
    out["losses"] = ([list(r.losses) for r in results if r.losses][0] if run.status == "ok"
                     else None)
    print(json.dumps(out))
    return 0 if run.status == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
