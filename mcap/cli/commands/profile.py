"""``python -m mcap profile`` and ``python -m mcap sweep`` (issue 4 Profiling, issue 6).

Both record every run in the store as it finishes and resume from it; both take the
hidden ``--job ID`` the dashboard passes (``mcap.app.jobs.launch``) to report progress.
"""
from __future__ import annotations

import argparse
import sys

from mcap.cli import args as argtypes
from mcap.cli.options import (
    add_node_options, add_setup_options, executor_env, isolation_env, setup_from_args,
)
from mcap.core.errors import McapError


def _parallel_kinds(text: str) -> tuple[str, ...]:
    from mcap.workflow.capture.parallel import parse_kinds
    try:
        return parse_kinds(text)
    except McapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


OUT_HELP = ("write the mcap.%s/1 JSON here (checked before any run: never the store, an input, "
            "a folder or a file of another kind; an existing file of the same schema is replaced)")


def register(sub) -> None:
    p = sub.add_parser("profile", help="incremental profiling (mCAP 3.1) -> mcap.profile/1 JSON",
                       description="Run the profiling plan with real stage processes, record each "
                                   "run in the store, fall back on oom, extract the statistics.")
    add_setup_options(p)
    p.add_argument("--scheme", choices=("mcap", "capture"), default="mcap",
                   help="which profiling partitionings (mCAP 3.1, or CAPTURE's Description 1)")
    p.add_argument("--parallel", type=_parallel_kinds, default=(), metavar="dp,tp",
                   help="also profile 2- and 4-way data- (dp) / tensor-parallel (tp) stages on "
                        "engine hybrid (CAPTURE III-A1): degree k when --stages holds at least "
                        "2 groups of k devices; the pipeline-only runs then run on engine "
                        "hybrid too (the default engine becomes hybrid). With --merge-to they "
                        "run on the merged layers, with --capture / --profile-batch-sizes at "
                        "each profiling batch size")
    p.add_argument("--out", required=True, type=argtypes.out_path, metavar="FILE.json", help=OUT_HELP % "profile")
    p.add_argument("--press", action="store_true",
                   help="also measure MPress's costs: per layer the activation bytes saved "
                        "for backward and the forward time per micro-batch, and this "
                        "machine's host-swap and device-to-device bandwidths")
    p.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="measure every profiling run; by default a run whose every stage was "
                        "already measured in this setup (e.g. by a sweep) is composed from those")
    p.add_argument("--profile-batch-sizes", type=_batch_sizes, default=None, metavar="B1,B2",
                   help="CAPTURE (III-A2): run the profiling plan at these batch sizes (each a "
                        "multiple of --chunks) and predict at --batch-size from the line "
                        "through them")
    p.add_argument("--capture", action="store_true",
                   help="CAPTURE batch-size scaling at a quarter and a half of --batch-size")
    p.add_argument("--merge-to", type=argtypes.positive_int, default=None, metavar="Lm",
                   help="CAPTURE's layer merger (III-A3): merge adjacent layers until Lm remain; "
                        "profiling after the first batch size and prediction run on them")
    add_node_options(p)
    p.set_defaults(func=cmd_profile)

    s = sub.add_parser("sweep", help="measure every partitioning, or a seeded sample -> mcap.sweep/1",
                       description="Measure all C(L-1, G-1) partitionings (or --sample N of them) "
                                   "into the store; resumable. By default only a set covering "
                                   "every distinct stage is measured and the rest composed.")
    add_setup_options(s)
    s.add_argument("--sample", type=argtypes.positive_int, default=None, metavar="N",
                   help="measure N partitionings drawn uniformly (default: all)")
    s.add_argument("--seed", type=argtypes.seed, default=0, metavar="S")
    s.add_argument("--no-reuse", dest="reuse", action="store_false",
                   help="measure every partitioning; by default only a set that covers every "
                        "distinct stage is measured and the others' per-stage peaks are "
                        "composed from it (their throughput is then not measured)")
    s.add_argument("--out", required=True, type=argtypes.out_path, metavar="FILE.json", help=OUT_HELP % "sweep")
    add_node_options(s)
    s.set_defaults(func=cmd_sweep)


def _run(args, action) -> int:
    from mcap.workflow import measuring, profiling
    from mcap.models.spec import parse_spec
    from mcap.store import Store

    from mcap.io.outputs import check_out
    from mcap.store.opening import resolve_path

    parse_spec(args.model)  # a bad spec exits 2 before anything is opened
    setup = setup_from_args(args)
    store_path = resolve_path(args.store)
    check_out(args.out, f"mcap.{args.command}/1", store=store_path)  # before any run
    if getattr(args, "nnodes", None) is not None:  # through torchrun on every node
        from mcap.cli.nodes import launch_command
        measuring.check_stages(measuring.model_info(args.model, setup), setup)  # exit 2 before it
        return launch_command(args, setup)
    store = Store(store_path)
    try:
        with measuring.sigterm_cancels(), isolation_env(args.isolation), executor_env(args):
            return action(profiling, setup, store)
    except measuring.Cancelled:
        print(f"mcap: {args.command} cancelled; finished runs are kept in the store", file=sys.stderr)
        return 143
    finally:
        store.close()


def _write(obj, out, kind: str, stored_id: int, store) -> None:
    """The result file, written after the store has it: a failed write names the command
    that writes it again from the store (``mcap.io.outputs``)."""
    from mcap.io.outputs import write_or_explain
    write_or_explain(obj, out, kind, stored_id, store.path)


def _batch_sizes(text: str) -> tuple[int, ...]:
    from mcap.core import numbers
    sizes = tuple(numbers.whole(t) for t in text.split(","))  # ASCII digits only
    if len(sizes) < 2 or any(b is None or b < 1 for b in sizes):
        raise argparse.ArgumentTypeError(f"expected two or more batch sizes >= 1 separated by "
                                         f"commas (e.g. 8,16), got {text[:80]!r}")
    return sizes


def cmd_profile(args) -> int:
    from mcap.workflow.capture import batches
    sizes = batches.sizes_from_args(args.batch_size, args.profile_batch_sizes, args.capture)
    if sizes is not None:
        from mcap.core.capture.batchscale import check_sizes
        check_sizes(sizes, args.batch_size, args.chunks)  # exit 2 before anything runs
    if args.press and (sizes is not None or args.merge_to is not None):
        raise McapError("--press measures MPress statistics at one batch size on the real "
                        "layers; it cannot be combined with --capture, --profile-batch-sizes "
                        "or --merge-to (profile twice)")

    if args.parallel and args.press:
        # MPress plans apply to pipeline-only partitionings (measure --press refuses --plan,
        # recommend --press refuses --mesh); --press measures each layer whole on one
        # device, not a dp stage's share of the rows or a tp stage's shards.
        raise McapError("--press measures MPress statistics for pipeline-only partitionings "
                        "(an MPress plan applies to a --balance, never to a hybrid --plan); it "
                        "cannot be combined with --parallel (profile twice)")
    if args.parallel:
        # The pipeline-only runs of a hybrid profile run on the engine its dp/tp runs and
        # its plans run on (mcap.workflow.capture.parallel.check_base_engine says why).
        from mcap.workflow.capture.parallel import check_base_engine
        if args.engine == "auto":
            from mcap.runner.engines import plans_engine
            args.engine = plans_engine()
        check_base_engine(args.engine)

    if args.nnodes is not None and args.press:
        raise McapError("--press measures MPress statistics in this one process, on this "
                        "machine; it cannot be combined with --nnodes")
    if args.nnodes is not None and args.parallel:  # exit 2 on every node before torchrun
        from mcap.workflow.capture.parallel import check_parallel
        check_parallel(args.parallel, setup_from_args(args))
        if sizes is not None:
            from mcap.workflow.capture.batches import check_parallel_sizes
            check_parallel_sizes(args.parallel, setup_from_args(args), sizes)

    def action(profiling, setup, store):
        request = profiling.ProfileRequest(args.model, setup, scheme=args.scheme, job=args.job,
                                           timeout=args.timeout, reuse=args.reuse,
                                           press=args.press, parallel=tuple(args.parallel))
        if sizes is not None:
            result = batches.profile(request, store=store, sizes=sizes, merge_to=args.merge_to)
        elif args.merge_to is not None:
            result = batches.profile_merged(request, store=store, merge_to=args.merge_to)
        else:
            result = profiling.profile(request, store=store)
        _write(result.profile, args.out, "profile", result.profile_id, store)
        print(profiling.summary("profile", result.tally, args.out, result.profile_id))
        for line in variant_lines(result.profile):
            print(line)
        return 0
    return _run(args, action)


def variant_lines(profile) -> list[str]:
    """One line per variant of a profile: a pp variant is a profiled batch size (--capture,
    --profile-batch-sizes), a dp/tp one a degree's runs on sub-meshes (--parallel). A pp
    variant once printed as "pp1: N runs on G sub-meshes of 1 devices", the same line for
    every batch size."""
    lines = []
    sizes = {v.batch_size for v in profile.variants if v.parallel != "pp"}
    for v in profile.variants:
        if v.parallel == "pp":
            n = len(v.runs)
            lines.append(f"  batch size {v.batch_size}: {n} run{'' if n == 1 else 's'}")
        else:  # with --capture and --parallel, a dp/tp line per batch size: say which
            at = f" at batch size {v.batch_size}" if len(sizes) > 1 else ""
            lines.append(f"  {v.parallel}{v.degree}{at}: {len(v.runs)} runs on "
                         f"{profile.setup.stages // v.degree} sub-meshes of {v.degree} devices")
    return lines


def cmd_sweep(args) -> int:
    def action(profiling, setup, store):
        from mcap.workflow.sweeping import sweep
        result = sweep(args.model, setup, None, store=store, sample=args.sample,
                       seed=args.seed, job=args.job, timeout=args.timeout, reuse=args.reuse)
        _write(result.sweep, args.out, "sweep", result.sweep_id, store)
        print(profiling.summary("sweep", result.tally, args.out, result.sweep_id))
        said = _estimated_line(result.sweep)
        if said:
            print(said)
        return 0
    return _run(args, action)


def _estimated_line(sweep) -> str:
    """What a sweep's throughputs estimated from stages run alone rest on ("" if none)."""
    from mcap.core import stagetime
    n = sum(1 for r in sweep.runs if r.estimated)
    if not n:
        return ""
    link = stagetime.link_from_json((sweep.extra or {}).get(stagetime.KEY))
    over = f" over {stagetime.describe(link)}" if link is not None else ""
    return (f"sweep: the throughput of {n} of {len(sweep.runs)} runs is estimated from their "
            f"stages' own times{over}; --isolation pipeline times the stages together")


__all__ = ["register", "cmd_profile", "cmd_sweep", "variant_lines"]
