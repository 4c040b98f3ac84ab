"""Measuring beyond one machine (issue 15, item 8): ``measure --nnodes N --node-rank R
--rdzv-endpoint HOST:PORT`` runs the same command on every node; each starts ``torchrun``
(``python -m torch.distributed.run``) with devices / N processes running
``mcap.cli.spmd``, which measures a pipeline-only balance (engine pipelining) or a hybrid
plan (engine hybrid). Ranks are fixed by node: rank = node rank x processes per node + local
rank (torchrun's static rendezvous at HOST:PORT, which node 0 serves), so device d of the
plan is rank d whatever order the nodes start in. Node 0 prints the run (``measure --json``'s
form) and records it in its store (where the ranks ran is not one machine: recorded as
unknown); the other nodes print nothing.

``profile`` and ``sweep`` take the same three options: every node starts torchrun with
devices / N ranks of ``mcap.cli.spmd_run``, whose rank 0 (on node 0) runs the command itself,
unchanged (store, plan, oom fallback, resume, output file), with each run's stages trained on
the ranks of all nodes (:mod:`mcap.runner.spmdrunner`); ``profile --parallel dp,tp`` runs its
pipeline-only and dp/tp runs there on engine hybrid, one rank per device. Input is checked on
every node before torchrun starts, and node 0 exits with the command's own status.
"""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

from mcap.core.errors import McapError


def _endpoint(text) -> tuple[str, int]:
    from mcap.core import numbers
    host, _, port = str(text or "").rpartition(":")
    number = numbers.whole(port) if port.strip() == port else None  # ASCII digits only
    if not host or number is None or not 0 < number < 65536:
        raise McapError(f"--rdzv-endpoint {str(text)[:80]!r}: expected HOST:PORT, e.g. "
                        "node0:29500")
    return host, number


def torchrun_argv(args, devices: int) -> list[str]:
    """``python -m torch.distributed.run`` with this node's share of ``devices`` ranks, up to
    its ``-m``; checks the node options, naming the values."""
    if args.nnodes is None:
        raise McapError("--nnodes is needed to run across nodes")
    if not 0 <= args.node_rank < args.nnodes:
        raise McapError(f"--node-rank {args.node_rank}: expected 0..{args.nnodes - 1} for "
                        f"--nnodes {args.nnodes}")
    if devices % args.nnodes:
        raise McapError(f"{devices} devices do not split over {args.nnodes} nodes; each node "
                        "runs the same number of processes")
    host, port = _endpoint(args.rdzv_endpoint)
    _check_local_processes(devices // args.nnodes, args.device)
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(args.nnodes),
            "--node-rank", str(args.node_rank), "--nproc-per-node", str(devices // args.nnodes),
            "--rdzv-backend", "static", "--master-addr", host, "--master-port", str(port), "-m"]


def _check_local_processes(processes: int, device: str) -> None:
    """This node's ranks must be processes it can start (the engines' own check,
    ``mcap.runner.engines.base.check_processes``), before torchrun starts any."""
    from mcap.runner.engines.base import check_processes
    gpus = None
    if device == "cuda":
        import torch
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    check_processes(processes, device, gpus, what="this node's share of the run")


def spmd_argv(args, devices: int) -> list[str]:
    """The torchrun command of this node: the measurement's own options, forwarded."""
    prefix = torchrun_argv(args, devices)
    what = ["--plan", args.plan.text] if getattr(args, "plan", None) is not None \
        else ["--balance", ",".join(map(str, args.balance))]
    forwarded = ["--model", args.model, "--batch-size", args.batch_size, "--chunks",
                 args.chunks, "--schedule", args.schedule, "--checkpoint", args.checkpoint,
                 "--optimizer", args.optimizer, "--device", args.device, "--threads",
                 args.threads, "--timeout", args.timeout, "--engine", args.engine]
    if args.capacity:
        forwarded += ["--capacity", args.capacity]
    return [*prefix, "mcap.cli.spmd", *map(str, forwarded), *what, "--json"]


def launch_measure(args, devices: int) -> int:
    """Run this node's share; on node 0 print and record the run."""
    from mcap.core.types import Run

    argv = spmd_argv(args, devices)
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True,
                          timeout=args.timeout * 2 + 120)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if args.node_rank != 0 or line is None:
        return proc.returncode if proc.returncode in (0, 1, 2) else 1
    got = json.loads(line)
    run = Run(tuple(got["balance"]), got["status"],
              tuple(got["peaks"]) if got.get("peaks") else None, float(got["seconds"]),
              samples_per_second=got.get("samples_per_second"), error=got.get("error"))
    print(line if args.json else f"{run.status}: peaks {run.peaks}", flush=True)
    _record(args, run)  # after the print: a store that refuses it cannot hide the result
    return 0 if run.status == "ok" else 1


NODE_OPTIONS = ("--nnodes", "--node-rank", "--rdzv-endpoint")


def _without_node_options(argv: list[str]) -> list[str]:
    """The command line as given, less the node options (``--opt V`` and ``--opt=V``)."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
        elif token in NODE_OPTIONS:
            skip = True
        elif not token.startswith(tuple(f"{o}=" for o in NODE_OPTIONS)):
            out.append(token)
    return out


def launch_command(args, setup) -> int:
    """``profile`` / ``sweep`` across nodes: this node's torchrun; node 0 returns the
    command's own exit status (``mcap.cli.spmd_run``)."""
    import os
    import tempfile

    from mcap.runner.engines import across_nodes
    if setup.engine not in across_nodes():
        raise McapError(f"--nnodes runs engines {' and '.join(across_nodes())}; engine "
                        f"{setup.engine} does not run across nodes")
    devices = setup.stages
    command = _without_node_options(list(args.argv))
    argv = torchrun_argv(args, devices) + ["mcap.cli.spmd_run", "--device", args.device,
                                           "--timeout", str(args.timeout), "--", *command]
    with tempfile.TemporaryDirectory(prefix="mcap-nodes-") as tmp:
        status_file = os.path.join(tmp, "status")
        env = dict(os.environ, MCAP_SPMD_STATUS=status_file)
        proc = subprocess.run(argv, env=env)
        if args.node_rank == 0 and os.path.exists(status_file):
            with open(status_file) as f:
                return int(f.read().strip() or 1)
        if proc.returncode != 0:
            print(f"mcap: error: torchrun on node {args.node_rank} exited {proc.returncode}; "
                  "runs finished before that are in node 0's store", file=sys.stderr)
            return 1
        return 0


def _record(args, run) -> None:
    from mcap.cli.options import setup_from_args
    from mcap.core.capture.plan import store_engine, stored_run
    from mcap.store import Store
    from mcap.workflow.measuring import model_info

    info = model_info(args.model)
    plan = getattr(args, "plan", None)
    if plan is not None:
        from mcap.runner.engines import plans_engine
        args.stages, args.engine = len(plan.stages), plans_engine()
        setup = dataclasses.replace(setup_from_args(args), engine=store_engine(plan))
        run = stored_run(plan, run)
    else:
        args.stages = len(run.balance)
        setup = setup_from_args(args)
    with Store(args.store) as store:  # a busy store: waited for, else the recovery file
        store.keep_run(info, setup, run, kind="measure", job=args.job)


__all__ = ["launch_command", "launch_measure", "spmd_argv"]
