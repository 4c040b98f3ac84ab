"""``python -m mcap profile`` and ``python -m mcap sweep`` (issue 4 Profiling, issue 6).

Both record every run in the store as it finishes and resume from it; both take the
hidden ``--job ID`` the dashboard passes (``mcap.app.jobs.launch``) to report progress.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from mcap.core.errors import McapError
from mcap.core.types import CHECKPOINTS, DEVICES, OPTIMIZERS, SCHEDULES, Setup
from mcap.runner import engines

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``123456``, ``512MiB``, ``1.5GB`` -> int bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"capacity {text!r} is not a size: use bytes (123456) or a unit "
            f"({', '.join(u for u in ('KiB', 'MiB', 'GiB', 'KB', 'MB', 'GB'))})")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value <= 0:
        raise argparse.ArgumentTypeError(f"capacity must be positive, got {text!r}")
    return value


def _threads(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"threads must be a whole number of at least 1, "
                                         f"got {text!r}")
    return value


def add_setup_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="SPEC",
                   help="e.g. vgg11:image_size=32, amoebanet-d:layers=6,filters=64, "
                        "gpt:layers=8,hidden=256, or package.module:function")
    p.add_argument("--stages", type=int, required=True, metavar="G", help="pipeline stages (devices)")
    p.add_argument("--batch-size", type=int, default=32, metavar="B")
    p.add_argument("--chunks", type=int, default=4, metavar="M", help="micro-batches per batch")
    p.add_argument("--schedule", choices=SCHEDULES, default="gpipe")
    p.add_argument("--checkpoint", choices=CHECKPOINTS, default="except_last")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="sgd")
    p.add_argument("--capacity", type=parse_bytes, default=None, metavar="BYTES",
                   help="memory per device; a stage above it is an oom run")
    p.add_argument("--engine", "--backend", dest="engine", choices=("auto", *engines.names()),
                   default="auto",
                   help="pipeline runtime (auto: the default, pipelining); "
                        + "; ".join(f"{e.name}: {e.help}" for e in map(engines.get, engines.names()))
                        + ". --backend is the old name of this flag")
    p.add_argument("--device", choices=DEVICES, default="cpu")
    p.add_argument("--threads", type=_threads, default=1, metavar="N",
                   help="intra-op threads of each stage process (default 1): CPU peaks depend "
                        "on them, so they are fixed and recorded with the setup")
    p.add_argument("--store", default=None, metavar="PATH",
                   help="results store (default $MCAP_STORE or .mcap/store.sqlite)")
    p.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds per run")
    p.add_argument("--job", type=int, default=None, help=argparse.SUPPRESS)


def setup_from_args(args) -> Setup:
    engine = engines.DEFAULT if args.engine == "auto" else args.engine
    return Setup(stages=args.stages, batch_size=args.batch_size, chunks=args.chunks,
                 schedule=args.schedule, checkpoint=args.checkpoint, device=args.device,
                 capacity_bytes=args.capacity, engine=engine, optimizer=args.optimizer,
                 threads=args.threads)


def register(sub) -> None:
    p = sub.add_parser("profile", help="incremental profiling (mCAP 3.1) -> mcap.profile/1 JSON",
                       description="Run the profiling plan with real stage processes, record each "
                                   "run in the store, fall back on oom, extract the statistics.")
    add_setup_options(p)
    p.add_argument("--scheme", choices=("mcap", "capture"), default="mcap",
                   help="which profiling partitionings (mCAP 3.1, or CAPTURE's Description 1)")
    p.add_argument("--out", required=True, type=Path, metavar="FILE.json")
    p.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="measure every profiling run; by default a run whose every stage was "
                        "already measured in this setup (e.g. by a sweep) is composed from those")
    p.set_defaults(func=cmd_profile)

    s = sub.add_parser("sweep", help="measure every partitioning, or a seeded sample -> mcap.sweep/1",
                       description="Measure all C(L-1, G-1) partitionings (or --sample N of them) "
                                   "into the store; resumable. By default only a set covering "
                                   "every distinct stage is measured and the rest composed.")
    add_setup_options(s)
    s.add_argument("--sample", type=int, default=None, metavar="N",
                   help="measure N partitionings drawn uniformly (default: all)")
    s.add_argument("--seed", type=int, default=0, metavar="S")
    s.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="measure every partitioning; by default only a set that covers every "
                        "distinct stage is measured and the others' per-stage peaks are "
                        "composed from it (their throughput is then not measured)")
    s.add_argument("--out", required=True, type=Path, metavar="FILE.json")
    s.set_defaults(func=cmd_sweep)


def _run(args, action) -> int:
    from mcap.workflow import profiling
    from mcap.models.spec import parse_spec
    from mcap.store import Store

    parse_spec(args.model)  # a bad spec exits 2 before anything is opened
    setup = setup_from_args(args)
    store = Store(args.store)
    try:
        with profiling.sigterm_cancels():
            return action(profiling, setup, store)
    except profiling.Cancelled:
        print(f"mcap: {args.command} cancelled; finished runs are kept in the store", file=sys.stderr)
        return 143
    finally:
        store.close()


def cmd_profile(args) -> int:
    def action(profiling, setup, store):
        result = profiling.profile(args.model, setup, args.out, store=store, scheme=args.scheme,
                                   job=args.job, timeout=args.timeout, reuse=args.reuse)
        print(profiling.summary("profile", result.tally, args.out, result.profile_id))
        return 0
    return _run(args, action)


def cmd_sweep(args) -> int:
    def action(profiling, setup, store):
        result = profiling.sweep(args.model, setup, args.out, store=store, sample=args.sample,
                                 seed=args.seed, job=args.job, timeout=args.timeout,
                                 reuse=args.reuse)
        print(profiling.summary("sweep", result.tally, args.out, result.sweep_id))
        return 0
    return _run(args, action)


__all__ = ["register", "add_setup_options", "setup_from_args", "parse_bytes", "McapError"]
