"""Options several commands share, and what they turn into (a ``Setup``, a search context,
the environment a run measures in). Command modules (``mcap.cli.commands``) import this;
it imports no command module, so the CLI has no import cycle (tests/test_architecture.py).

The argparse *types* (counts, sizes, seeds) are ``mcap.cli.args``.
"""
from __future__ import annotations

import argparse
import contextlib
import os

from mcap.cli import args as argtypes
from mcap.cli.args import parse_bytes
from mcap.core import numbers
from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.partition import parse_balance as core_parse_balance
from mcap.core import schedules
from mcap.core.types import CHECKPOINTS, DEVICES, OPTIMIZERS, PRECISIONS, Setup
from mcap.models.spec import trusted_model_arg
from mcap.runner import engines

# --- the setup of a run: profile, sweep, measure, scale ------------------------------------


def _threads(text: str) -> int:
    """``--threads N``: 1 .. the cores this process may run on (issue 28: 100000 was taken,
    and the stage process died with signal 11 inside gloo)."""
    value = numbers.whole(text) or 0  # ASCII digits only (mcap.core.numbers)
    if value < 1:
        raise argparse.ArgumentTypeError(f"threads must be a whole number of at least 1, "
                                         f"got {text!r}")
    cores = _cores()
    if value > cores:
        raise argparse.ArgumentTypeError(f"--threads {value:,} is more than the {cores} CPU "
                                         f"core{'' if cores == 1 else 's'} this machine gives "
                                         f"mcap; give 1..{cores}")
    return value


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def add_setup_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="SPEC", type=trusted_model_arg,
                   help="e.g. vgg11:image_size=32, amoebanet-d:layers=6,filters=64, "
                        "gpt:layers=8,hidden=256, or package.module:function (a user model: "
                        "its module is imported and its function called; mcap runs user code "
                        "only when you type it here, never because a file names it)")
    p.add_argument("--stages", type=argtypes.positive_int, required=True, metavar="G",
                   help="pipeline stages (devices)")
    p.add_argument("--batch-size", type=argtypes.positive_int, default=32, metavar="B")
    p.add_argument("--chunks", type=argtypes.positive_int, default=4, metavar="M",
                   help="micro-batches per batch")
    add_schedule_options(p)
    p.add_argument("--checkpoint", type=checkpoint_arg, default="except_last",
                   metavar="MODE[,MODE...]",
                   help=f"activation checkpointing: one of {', '.join(CHECKPOINTS)} for every "
                        "stage, or one per pipeline stage, comma-separated (a multi-stage "
                        "schedule has stages x virtual stages of them)")
    p.add_argument("--precision", choices=PRECISIONS, default="fp32",
                   help="fp32; bf16-autocast (fp32 weights, bf16 autocast in forward); bf16 "
                        "(bf16 weights and activations, fp32 master weights and optimizer "
                        "state, as torchtitan keeps them)")
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
    p.add_argument("--store", default=None, metavar="PATH", type=argtypes.in_path,
                   help="results store (default $MCAP_STORE or .mcap/store.sqlite)")
    p.add_argument("--timeout", type=argtypes.timeout, default=300.0, metavar="S", help="seconds per run")
    p.add_argument("--isolation", choices=("stage", "pipeline"), default=None,
                   help="stage (the default): each stage runs alone in its own process over a "
                        "process group that moves no data, the memory truth, with its own "
                        "per-micro-batch times (throughput is estimated from them); pipeline: "
                        "the stages run together and exchange their data, the run whose time "
                        "is real. Engine hybrid runs each device (dp/tp rank) alone the same way; "
                        "torchgpipe always runs its stages together")
    p.add_argument("--job", type=argtypes.integer, default=None, help=argparse.SUPPRESS)
    add_executor_options(p)


def add_schedule_options(p: argparse.ArgumentParser, any_: bool = False) -> None:
    """``--schedule`` (the registry's names; ``any``: compare them all, where a command
    can) and ``--virtual-stages``."""
    names = schedules.names()
    p.add_argument("--schedule", choices=(*names, "any") if any_ else names,
                   default=schedules.DEFAULT,
                   help="; ".join(f"{s.name}: {s.help}" for s in schedules.REGISTRY)
                        + ("; any: every schedule, compared" if any_ else ""))
    p.add_argument("--virtual-stages", type=argtypes.positive_int, default=None, metavar="V",
                   help="pipeline stages per rank for the multi-stage schedules ("
                        + ", ".join(schedules.names(stages_per_rank="many"))
                        + f"; default 2); {', '.join(schedules.names(stages_per_rank='two'))} "
                          "fix it at 2")


def checkpoint_arg(text: str) -> str:
    """``--checkpoint MODE`` or ``MODE,MODE,...`` (one per stage), each a known mode."""
    parts = text.split(",")
    bad = [p for p in parts if p not in CHECKPOINTS]
    if bad or not text:
        raise argparse.ArgumentTypeError(f"checkpoint {bad[0] if bad else text!r} is not one of "
                                         f"{', '.join(CHECKPOINTS)} (give one mode, or one per "
                                         "stage, comma-separated)")
    return text


def virtual_of(args, schedule: str = None) -> int:
    """``--virtual-stages`` for the schedule, checked by the registry (McapError, exit 2)."""
    return schedules.get(schedule or args.schedule).virtual(getattr(args, "virtual_stages", None))


def add_executor_options(p: argparse.ArgumentParser) -> None:
    """``--executor NAME`` and every executor's own flags (issue 42), from the registry."""
    from mcap.runner import executors
    p.add_argument("--executor", choices=executors.names(), default=None,
                   help="where the stage-alone measurements run (default $MCAP_EXECUTOR, else "
                        f"{executors.DEFAULT}); "
                        + "; ".join(f"{n}: {executors.get(n).help}" for n in executors.names()))
    for flag in executors.all_flags():
        owners = [n for n in executors.names() if flag in executors.get(n).flags]
        p.add_argument(flag.option, dest=flag.dest, default=None, metavar=flag.metavar,
                       help=f"{'/'.join(owners)}: {flag.help} (${flag.env})")


@contextlib.contextmanager
def executor_env(args):
    """Inside, every runner of this process measures with the executor ``args`` chose
    (``--executor`` and its flags, else the environment's ``$MCAP_EXECUTOR`` and the flags'
    variables), which is checked first: exit 2 naming the executor and what is missing."""
    from mcap.runner import executors
    name = getattr(args, "executor", None) or executors.chosen_name()
    executor = executors.get(name)
    given = {f.dest: f for f in executors.all_flags()
             if getattr(args, f.dest, None) is not None}
    foreign = [f.option for d, f in given.items() if f not in executor.flags]
    if foreign:
        raise McapError(f"{', '.join(foreign)} appl{'ies' if len(foreign) == 1 else 'y'} to "
                        f"another executor, not --executor {name}")
    changes = {executors.ENV: name}
    for dest, flag in given.items():
        changes[flag.env] = str(flag.parse(getattr(args, dest), flag.option))
    saved = {k: os.environ.get(k) for k in changes}
    os.environ.update(changes)
    try:
        executor.check(executor.settings())  # bad input: exit 2 before anything starts
        yield executor
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def setup_from_args(args) -> Setup:
    engine = engines.DEFAULT if args.engine == "auto" else args.engine
    return Setup(stages=args.stages, batch_size=args.batch_size, chunks=args.chunks,
                 schedule=args.schedule, checkpoint=args.checkpoint, device=args.device,
                 capacity_bytes=args.capacity, engine=engine, optimizer=args.optimizer,
                 threads=args.threads, virtual_stages=virtual_of(args),
                 precision=getattr(args, "precision", "fp32"))


def plan_setup(args, plan):
    """The runner's setup for a CAPTURE ``plan`` (``measure --plan``): engine hybrid, one
    "stage" process per device."""
    from mcap.core.capture.plan import check_micro_batches

    capture = engines.plans_engine()  # the engine that runs CAPTURE's plans (hybrid)
    if args.engine not in ("auto", capture):
        raise McapError(f"--plan {plan.text} runs on engine {capture}, not --engine {args.engine}")
    if args.stages is not None and args.stages != plan.devices:
        raise InvalidPartitioning(f"plan {plan.text} uses {plan.devices} devices but --stages "
                                  f"is {args.stages}")
    args.stages, args.engine = plan.devices, capture
    setup = setup_from_args(args)
    check_micro_batches(plan, setup.batch_size, setup.chunks)
    return setup


@contextlib.contextmanager
def isolation_env(isolation):
    """Inside, every runner of this process measures with ``isolation`` (``--isolation``;
    ``mcap.runner.resolve_isolation`` reads ``$MCAP_ISOLATION``), and so do the machine
    fingerprints that look stored runs up; None leaves the environment as it is."""
    from mcap.runner.isolation import ISOLATION_ENV
    if isolation is None:
        yield
        return
    saved = os.environ.get(ISOLATION_ENV)
    os.environ[ISOLATION_ENV] = isolation
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ISOLATION_ENV, None)
        else:
            os.environ[ISOLATION_ENV] = saved


# --- what is measured: a balance or a CAPTURE plan --------------------------------------


def parse_balance(text: str) -> tuple[int, ...]:
    """``3,3,5,19`` -> (3, 3, 5, 19); argparse shows the core's message on bad text."""
    try:
        return core_parse_balance(text)
    except McapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_plan_arg(text: str):
    """``3,3,10:tp2`` -> HybridPlan; argparse shows the core's message on bad text."""
    from mcap.core.capture.plan import parse_plan
    try:
        return parse_plan(text)
    except McapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --- prediction: predict, recommend, press, evaluate, scale -------------------------------


def add_predictor_option(p) -> None:
    """``--predictor NAME``, choices and help from the registry (shared by every command)."""
    from mcap.core import predictors
    p.add_argument("--predictor", choices=predictors.names(), default=predictors.DEFAULT,
                   help=f"how peaks are predicted (default {predictors.DEFAULT}); "
                        + "; ".join(f"{n}: {predictors.get(n).help.rstrip('.')}"
                                   for n in predictors.names()))


def add_batch_size_option(p) -> None:
    p.add_argument("--batch-size", type=argtypes.positive_int, default=None, metavar="B",
                   help="predict at this batch size (default: the profile's); another one needs "
                        "a CAPTURE profile with two batch sizes (profile --capture)")


def search_context(profile, method: str):
    """The profile's search context; a method that needs the real model (``needs_model``:
    ``time``) gets the model timer (torch)."""
    from mcap.core import search
    from mcap.core.recommend import context_of
    if not search.choose(method)[0].needs_model:
        return context_of(profile)
    try:
        from mcap.runner.timebalance import check_device, check_fits, timer
    except ImportError as exc:
        raise McapError(f"method {method!r} needs torch and torchgpipe, which cannot be "
                        f"imported here: {exc}") from None
    from mcap.core.capture import merging
    from mcap.core.setup import micro_batch
    if merging.sizes_of(profile) is None:  # before any timing: the file's sizes fit, and agree
        check_device(profile.setup.device)
        check_fits(profile.model.spec, micro_batch(profile.setup), profile.model.num_layers)
    return context_of(profile, timer=timer(device=profile.setup.device))


# --- across nodes: measure, profile, sweep (mcap.cli.nodes) ------------------------------


def add_node_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--nnodes", type=argtypes.positive_int, default=None, metavar="N",
                   help="run across N nodes through torchrun (the same command on each node)")
    p.add_argument("--node-rank", type=argtypes.integer, default=None, metavar="R",
                   help="this node's rank, 0..N-1 (with --nnodes; default 0)")
    p.add_argument("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                   help="node 0's address and a free port (with --nnodes)")
    p.set_defaults(check_args=check_node_options)  # mcap.cli.main, before the command runs


def check_node_options(args) -> None:
    """``--node-rank`` / ``--rdzv-endpoint`` mean something only with ``--nnodes``: given
    without it they were silently ignored (the run stayed on this machine); refused naming
    them. With ``--nnodes`` the rank defaults to 0, and ``--nnodes 1`` without an endpoint
    rendezvouses on this machine (127.0.0.1 and a free port); more nodes need one."""
    from mcap.runner import executors
    chosen = getattr(args, "executor", None)
    if args.nnodes is not None and chosen is not None and executors.get(chosen).remote:
        raise McapError(f"--nnodes runs one stage per rank through torchrun on the nodes you "
                        f"start it on; --executor {args.executor} sends each stage to a "
                        "cluster itself: use one or the other")
    if args.nnodes is None:
        given = [f"{opt} {value}" for opt, value in (("--node-rank", args.node_rank),
                                                      ("--rdzv-endpoint", args.rdzv_endpoint))
                 if value is not None]
        if given:
            raise McapError(f"{' and '.join(given)} apply only across nodes: give --nnodes N "
                            "as well, or leave them out to run on this machine")
    else:
        if args.node_rank is None:
            args.node_rank = 0
        if args.rdzv_endpoint is None:
            if args.nnodes != 1:
                raise McapError(f"--nnodes {args.nnodes} needs --rdzv-endpoint HOST:PORT: node "
                                "0's address and a free port, the same on every node (e.g. "
                                "node0:29500)")
            args.rdzv_endpoint = f"127.0.0.1:{_free_port()}"  # one node: this machine


def _free_port() -> int:
    import socket
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
