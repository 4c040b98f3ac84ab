"""An mcap command whose stages are torchrun ranks on every node (issue 15, item 8).

    torchrun --nnodes 2 --nproc-per-node 2 ... -m mcap.cli.spmd_run --device cpu \\
        --timeout 300 -- profile --model vgg11:image_size=32 --stages 4 ... --out p.json

``profile --nnodes`` and ``sweep --nnodes`` start this on each node (``mcap.cli.nodes``).
Rank 0 runs the command after ``--`` as ``python -m mcap`` would, its runs measured on all
ranks (:mod:`mcap.runner.spmdrunner`); the other ranks train their stage of each run. Rank 0
writes its exit status to ``$MCAP_SPMD_STATUS`` (a file the node-0 parent reads) and every
rank exits 0 when the ranks themselves worked, so a refused input is the command's exit 2
and message, not a torchrun failure report.
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mcap.cli.spmd_run")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("command", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command

    import torch
    import torch.distributed as dist
    import torch.distributed.pipelining  # noqa: F401  (import-time tensors stay uncounted)

    from mcap.runner import memtrack, runner_override
    from mcap.runner.spmdrunner import SpmdRunner, _Leader, follow

    rank = int(os.environ.get("RANK", 0))
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    else:
        memtrack.install()
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo",
                            timeout=timedelta(seconds=max(args.timeout, 120.0)))
    try:
        if rank != 0:
            follow()
            return 0
        from mcap.cli.main import main as mcap_main

        leader = _Leader()
        try:
            with runner_override(lambda spec, setup, timeout=300.0:
                                 SpmdRunner(leader, spec, setup, timeout=timeout)):
                status = mcap_main(command)
        finally:
            leader.stop()
        path = os.environ.get("MCAP_SPMD_STATUS")
        if path:  # a new file in mcap.cli.nodes' own temporary folder: never through a link
            from mcap.files import owned
            fd = owned.open_fd(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "$MCAP_SPMD_STATUS")
            with os.fdopen(fd, "w") as f:
                f.write(str(status))
            return 0
        return status
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(main())
