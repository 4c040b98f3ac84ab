"""Core commands: ``plan``, ``predict``, ``recommend`` (issue 3, CLI).

    python -m mcap plan --layers 30 --stages 4 [--scheme mcap|capture] [--json]
    python -m mcap plan --model hf:gpt2 --list-layers [--json]   (the layers mCAP sees)
    python -m mcap predict --profile FILE --balance 3,3,5,19 [--predictor NAME] [--json]
    python -m mcap recommend --profile FILE --stages 4 [--method NAME] [--predictor NAME] [--json]
    python -m mcap recommend --profile FILE --mesh 2x4 [--method exact|enumerate] [--json]
    python -m mcap predict --profile FILE --plan 3,3,10:tp2 [--json]
    python -m mcap recommend --profile FILE --stages 4 --capacity C --press   (mcap.cli.commands.press)
    python -m mcap recommend --profile CPU_FILE --stages 4 --for cuda    (mcap.cli.target)

``--mesh`` and ``--plan`` are hybrid plans (CAPTURE III; ``mcap.cli.commands.capture``).

Method and predictor choices come from their registries (``mcap.core.search``,
``mcap.core.predictors``).

Without ``--json`` they print a small table. Bad input raises McapError, which
``mcap.cli.main`` turns into one line and exit code 2. None of these import torch, except
``recommend --method time``, which loads ``mcap.runner.timebalance`` lazily.
"""
from __future__ import annotations

import argparse
import json

from mcap.cli import args as argtypes
from mcap.cli.deep import add_blocks_option, deepened, refuse_with
from mcap.cli.options import add_batch_size_option, add_predictor_option, search_context
from mcap.cli.output import line_note, stage_table
from mcap.core.errors import McapError
from mcap.core.partition import parse_balance
from mcap.core.units import fmt_bytes
from mcap.models.spec import trusted_model_arg


def _positive_int(text: str) -> int:
    return argtypes.positive_int(text)


def _costs(profile, args):
    """The profile's stage costs at ``--batch-size`` (``mcap.core.capture.batchscale``), for the
    ``--for`` target (``mcap.cli.target``)."""
    from mcap.cli import target
    from mcap.core.recommend import costs_at
    return target.translate(costs_at(profile, args.batch_size, args.predictor), profile, args)


def register(sub) -> None:
    from mcap.cli import target
    from mcap.cli.commands import capture
    from mcap.core import search
    p = sub.add_parser("plan", help="print the profiling partitionings for L layers on G stages")
    p.add_argument("--layers", type=_positive_int, help="number of layers L (default: the --model's)")
    p.add_argument("--stages", type=_positive_int, help="number of devices G")
    p.add_argument("--model", type=trusted_model_arg, metavar="SPEC",
                   help="a model spec (e.g. hf:gpt2:n_layer=6); its layer count is L. Builds it on "
                        "the meta device (no memory), so it imports torch")
    p.add_argument("--list-layers", action="store_true",
                   help="print the --model's layers in order (name, kind, parameter bytes, the "
                        "modules each wraps) and stop")
    p.add_argument("--scheme", choices=("mcap", "capture"), default="mcap")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("predict", help="predict a partitioning's per-stage peaks from a profile")
    p.add_argument("--profile", required=True, type=argtypes.in_path, help="a mcap.profile/1 JSON file")
    p.add_argument("--balance", help="layer counts per stage, e.g. 3,3,5,19")
    add_predictor_option(p)
    add_blocks_option(p)
    add_batch_size_option(p)
    target.add_option(p)
    p.add_argument("--json", action="store_true")
    capture.add_predict_options(p)  # --plan / --mesh: hybrid plans (mcap.cli.commands.capture)
    from mcap.cli.commands import schedules as schedule_cmds
    schedule_cmds.add_options(p, recommend=False)  # --schedule, --virtual-stages, --add-profile
    p.add_argument("--stages", type=_positive_int, default=None,
                   help="ranks, for --schedule (default: the profile's)")
    p.set_defaults(func=cmd_predict)

    p = sub.add_parser("recommend", help="recommend the partitioning with the lowest predicted peak")
    p.add_argument("--profile", required=True, type=argtypes.in_path, help="a mcap.profile/1 JSON file")
    p.add_argument("--stages", type=_positive_int, help="number of devices G")
    add_blocks_option(p)
    p.add_argument("--method", type=method_choice, choices=MethodChoices(), default=None,
                   metavar="{" + ",".join((*map(search.describe, search.REGISTRY),
                                           *capture.only_mesh_methods())) + "}",
                   help="; ".join(f"{search.describe(m)}: {m.help}" for m in search.REGISTRY))
    add_predictor_option(p)
    p.add_argument("--seed", type=argtypes.seed, default=0, help="seed for bo")
    from mcap.core.search.bayes import MAX_ITERATIONS
    p.add_argument("--iterations", default=75,
                   type=argtypes.bounded_int(MAX_ITERATIONS, "--iterations",
                                             "bo refits its surrogate on every evaluation"),
                   help=f"bo evaluations (paper: 75; at most {MAX_ITERATIONS})")
    p.add_argument("--tie-tolerance", type=argtypes.tolerance, default=0.0,
                   help="relative band above the lowest peak treated as a tie, 0..1 (default 0)")
    add_batch_size_option(p)
    target.add_option(p)
    argtypes.add_confirm_model_option(p, "recommend")
    from mcap.cli.commands.press import add_joint_options
    add_joint_options(p)  # --capacity, --press (MPress: partitioning + plan)
    p.add_argument("--json", action="store_true")
    capture.add_recommend_options(p)  # --mesh / --no-prune: hybrid plans (mcap.cli.commands.capture)
    from mcap.cli.commands import schedules as schedule_cmds
    schedule_cmds.add_options(p, recommend=True)  # --schedule [any], --virtual-stages
    p.set_defaults(func=cmd_recommend)


class MethodChoices:
    """``--method``'s choices, read from the registries when asked: iterating gives the
    names (search methods, then mesh-only searches), and ``name:ARGUMENT`` is one of them
    when ``name`` takes an argument (``method_choice`` has checked the argument)."""

    def _names(self) -> tuple[str, ...]:
        from mcap.cli.commands import capture
        from mcap.core import search
        return (*search.names(), *capture.only_mesh_methods())

    def __iter__(self):
        return iter(self._names())

    def __contains__(self, text) -> bool:
        from mcap.core import search
        name, colon, _ = str(text).partition(":")
        return name in self._names() and (not colon or bool(search.get(name).argument))


def method_choice(text: str) -> str:
    """``--method``: a search method's name or ``name:ARGUMENT`` (``type:LlamaDecoderLayer``,
    ``mcap.core.search.choose``), or a mesh search's name (``--mesh``); refused by argparse
    (exit 2) naming the choices."""
    from mcap.cli.commands import capture
    from mcap.core import search
    if text in capture.only_mesh_methods():
        return text
    try:
        search.choose(text)
    except McapError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def cmd_plan(args) -> int:
    from mcap.core.profiling.schedule import profiling_plan

    if args.list_layers and args.model is None:
        raise McapError("--list-layers needs --model SPEC (e.g. --model hf:gpt2)")
    if args.model is not None:
        layers, shared = _model_layers(args.model)
        if args.list_layers:
            return _print_layers(args.model, layers, shared, args.json)
        if args.layers is not None and args.layers != len(layers):
            raise McapError(f"--layers {args.layers}: the model {str(args.model)!r} has "
                            f"{len(layers)} layers")
        args.layers = len(layers)
    if args.layers is None or args.stages is None:
        raise McapError("plan needs --stages G and --layers L (or --model SPEC)")
    plan = profiling_plan(args.layers, args.stages, args.scheme)
    if args.json:
        print(json.dumps({"layers": plan.num_layers, "stages": plan.stages, "scheme": plan.scheme,
                          "runs": [list(r) for r in plan.runs],
                          "mem_isolated_from": [list(w) if w else None for w in plan.sources.isolated],
                          "mem_added_n": list(plan.sources.added)}))
        return 0
    print(f"{len(plan.runs)} profiling runs for {plan.num_layers} layers on {plan.stages} stages "
          f"(scheme {plan.scheme}; the paper's count is L-G+1 = {plan.num_layers - plan.stages + 1})")
    width = len(str(len(plan.runs)))
    for i, r in enumerate(plan.runs, 1):
        print(f"{i:>{width}}  {','.join(map(str, r))}")
    return 0


def _model_layers(spec) -> list[tuple[str, str, int, str]]:
    """(name, kind, parameter bytes, the modules it wraps) of each layer, built on meta."""
    from mcap.models import build_model
    built = build_model(spec, device="meta")
    sources = [getattr(child, "mcap_source", "") or name for name, child in built.module.named_children()]
    return [(l.name, l.kind, l.param_bytes, src) for l, src in zip(built.info.layers, sources)], \
        _shared_weights(built.module)


def _shared_weights(module) -> list[str]:
    """One line per weight that several layers hold (a tied embedding and head)."""
    owners: dict[int, list] = {}
    for name, child in module.named_children():
        for p in child.parameters():
            owners.setdefault(id(p), [p, []])[1].append(name)
    return [f"{' and '.join(names)} share one {fmt_bytes(p.numel() * p.element_size())} weight "
            f"{tuple(p.shape)} (tied): a stage holding {'both' if len(names) == 2 else 'several'} "
            f"holds one copy, stages apart hold one each and the runtime sums their gradients"
            for p, names in owners.values() if len(names) > 1]


def _print_layers(spec, layers, shared, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"model": str(spec), "layers": [
            {"index": i, "name": n, "kind": k, "param_bytes": b, "modules": src}
            for i, (n, k, b, src) in enumerate(layers)], "shared": shared}))
        return 0
    print(f"{len(layers)} layers of {str(spec)} (a stage holds consecutive layers; a weight "
          f"two layers share counts in both)")
    wn = max(len(n) for n, *_ in layers)
    wk = max(len(k) for _, k, *_ in layers)
    for i, (n, k, b, src) in enumerate(layers):
        print(f"{i:>4}  {n:<{wn}}  {k:<{wk}}  {fmt_bytes(b):>11}  {src}")
    for line in shared:
        print(line)
    return 0


def cmd_predict(args) -> int:
    from mcap.cli.commands import capture
    from mcap.core.capture import merging
    from mcap.io.jsonio import load_profile

    refuse_with(args, "--plan", "--mesh")
    if capture.wants_plan(args):
        from mcap.cli.target import refuse
        refuse(args, "--plan / --mesh (hybrid plans)")
        return capture.cmd_predict_plan(args)
    profile = load_profile(args.profile)
    from mcap.cli.commands import schedules as schedule_cmds
    if schedule_cmds.wanted(args, profile):  # multi-stage schedules: the op model
        return schedule_cmds.cmd_predict(args, profile)
    profile = deepened(profile, args.blocks, for_target=args.for_target)
    costs = _costs(profile, args)
    balance = tuple(parse_balance(args.balance))
    sizes = merging.sizes_of(profile)
    # A merged profile predicts over its merged layers; the user speaks in real layers.
    peaks = costs.peaks(balance if sizes is None else merging.contract(balance, sizes))
    if args.json:
        print(json.dumps({"predictor": costs.predictor, "balance": list(balance),
                          "predicted_peaks": list(peaks), "predicted_peak": max(peaks)}))
        return 0
    print(f"balance {','.join(map(str, balance))}: predicted peak {fmt_bytes(max(peaks))} "
          f"({max(peaks)} bytes; predictor {costs.predictor}{line_note(costs.details)})")
    stage_table(balance, peaks)
    return 0


def argtypes_allow(args, profile):
    argtypes.allow_model(profile, args.model)
    return args


def cmd_recommend(args) -> int:
    from mcap.core.recommend import recommend
    from mcap.cli.commands import capture
    from mcap.io.jsonio import load_profile

    from mcap.cli.target import refuse
    refuse_with(args, "--mesh", "--capacity", "--press")
    from mcap.cli.commands import schedules as schedule_cmds
    if not args.press and not capture.wants_mesh(args):
        first = load_profile(args.profile)
        if schedule_cmds.wanted(args, first):  # schedules' op model, --capacity: checkpointing
            return schedule_cmds.cmd_recommend(argtypes_allow(args, first), first)
    if args.press or args.capacity is not None:  # MPress (mcap.cli.commands.press); --capacity alone: refused there
        refuse(args, "--capacity / --press (MPress)")
        from mcap.cli.commands.press import cmd_joint
        return cmd_joint(args)
    if capture.wants_mesh(args):
        refuse(args, "--mesh (hybrid plans)")
        return capture.cmd_recommend_mesh(args)
    profile = deepened(load_profile(args.profile), args.blocks, for_target=args.for_target)
    profile = argtypes.allow_model(profile, args.model)
    source, context = profile, search_context(profile, args.method)
    if args.for_target:
        source = _costs(profile, args)
    if args.batch_size is not None:
        from dataclasses import replace
        source = _costs(profile, args)
        context = replace(context, micro_batch=max(args.batch_size // profile.setup.chunks, 1))
    predictor = source.predictor if args.for_target else args.predictor
    rec = recommend(source, args.stages, args.method, predictor, context=context,
                    tie_tolerance=args.tie_tolerance, seed=args.seed, iterations=args.iterations)
    from mcap.core.capture import merging
    sizes = merging.sizes_of(profile)
    if sizes is not None:  # a balance over merged layers -> over the model's real layers
        from dataclasses import replace
        rec = replace(rec, balance=merging.expand(rec.balance, sizes))
    if args.json:
        print(json.dumps({"method": rec.method, "predictor": rec.predictor,
                          "balance": list(rec.balance), "predicted_peaks": list(rec.predicted_peaks),
                          "predicted_peak": rec.predicted_peak, "seconds": rec.seconds,
                          "evaluated": rec.evaluated}))
        return 0
    print(f"method {rec.method}: balance {','.join(map(str, rec.balance))}, predicted peak "
          f"{fmt_bytes(rec.predicted_peak)} ({rec.predicted_peak} bytes, predictor "
          f"{rec.predictor}); searched {rec.evaluated} candidates in {rec.seconds:.3f} s")
    stage_table(rec.balance, rec.predicted_peaks)
    return 0
