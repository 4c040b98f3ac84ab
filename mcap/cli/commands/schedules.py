"""``predict`` and ``recommend`` under any schedule (issue 39), from op timelines, and
``actions``: the action list torch runs.

    python -m mcap actions --schedule zbv --stages 2 --chunks 4 [--virtual-stages V] [--json]

    python -m mcap predict --profile P --balance 2,2,3,3,... [--schedule S] [--virtual-stages V]
                           [--stages G] [--add-profile Q ...]
    python -m mcap recommend --profile P --stages G --schedule S|any [--virtual-stages V]
                             [--add-profile Q ...]

These run when the profile was measured under a multi-stage schedule, or when ``--schedule``
asks for another schedule than the profile's, or ``any``: the profile's rank timelines give
each chunk's op bytes (``mcap.core.schedules.memory``) and torch's action list of the asked
schedule (``mcap.runner.orders``: torch is imported for it) says in which order each rank
runs them. ``--add-profile`` adds a profile of the same model and setup under another
schedule (a zero-bubble one measures the I and W ops a GPipe profile lacks).
"""
from __future__ import annotations

import json

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.units import fmt_bytes


def register(sub) -> None:
    p = sub.add_parser("actions", help="print the action list torch runs for a schedule: "
                                       "each rank's forwards and backwards in order",
                       description="The order torch.distributed.pipelining's schedule runs "
                                   "each rank's ops in (read off torch's own class), with what "
                                   "each rank holds at most and the bubble of a replay with "
                                   "unit forwards. Imports torch.")
    p.add_argument("--schedule", required=True, choices=schedules.names())
    p.add_argument("--stages", type=int, required=True, metavar="G", help="ranks")
    p.add_argument("--chunks", type=int, default=4, metavar="M", help="micro-batches")
    p.add_argument("--virtual-stages", type=int, default=None, metavar="V")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_actions)


def cmd_actions(args) -> int:
    from mcap.core.schedules.actions import bubble, max_held, replay, to_dict
    from mcap.runner.orders import generate
    for flag, value in (("--stages", args.stages), ("--chunks", args.chunks)):
        if value is None or value < 1:
            raise McapError(f"{flag} must be a whole number of at least 1, got {value}")
    al = generate(args.schedule, args.stages, args.virtual_stages, args.chunks)
    timed = replay(al)
    held = max_held(al)
    if args.json:
        print(json.dumps({**to_dict(al), "max_held": list(held),
                          "bubble": bubble(timed, al.stages)}))
        return 0
    print(f"{schedules.get(al.schedule).label}: {al.stages} ranks x {al.virtual} stages, "
          f"{al.chunks} micro-batches ({al.source}); F forward, B backward, I / W backward "
          f"for inputs / weights, chunk before the kind, micro-batch after")
    for r in range(al.stages):
        print(f"rank {r} (chunks {','.join(map(str, al.placement[r]))}; holds at most "
              f"{held[r]} micro-batches): {al.text(r)}")
    print(f"bubble with unit forwards and two-unit backwards: {100 * bubble(timed, al.stages):.1f}%")
    return 0


def add_options(p, recommend: bool) -> None:
    p.add_argument("--schedule", default=None,
                   choices=(*schedules.names(), *(("any",) if recommend else ())),
                   help="predict under this schedule (default: the profile's)"
                        + ("; any: rank every schedule and V for these devices by predicted "
                           "peak, with the iteration time replayed from the profile's op times"
                           if recommend else ""))
    p.add_argument("--virtual-stages", type=int, default=None, metavar="V",
                   help="pipeline stages per rank for interleaved-1f1b, looped-bfs and "
                        "interleaved-zb (default 2; zbv and dualpipev fix it at 2)")
    if not recommend:
        p.add_argument("--checkpoint", default=None, metavar="MODE[,MODE...]",
                       help="predict with this checkpointing, one mode or one per stage "
                            "(the profiles must have measured each mode: --add-profile)")
    p.add_argument("--add-profile", action="append", default=[], metavar="FILE",
                   help="another profile of the same model and setup under another schedule "
                        "(its op timelines are added; a zero-bubble profile measures the I and "
                        "W ops a GPipe profile lacks)")


def wanted(args, profile) -> bool:
    """Whether this command goes through the schedules' memory model."""
    from mcap.core.schedules.predict import is_multi
    asked = getattr(args, "schedule", None)
    if getattr(args, "capacity", None) is not None and getattr(args, "add_profile", None):
        yes = True  # checkpointing chosen per stage, from profiles of two modes
    else:
        yes = is_multi(profile.setup) or bool(getattr(args, "add_profile", None)) \
            or (asked is not None and asked != profile.setup.schedule) \
            or getattr(args, "virtual_stages", None) not in (None, profile.setup.virtual_stages) \
            or getattr(args, "checkpoint", None) not in (None, profile.setup.checkpoint)
    if yes and getattr(args, "blocks", None) is not None:
        raise McapError(f"--blocks {args.blocks} deepens a GPipe/1F1B profile's pipeline stages; "
                        "the schedules' memory model (another schedule, virtual stages, "
                        "--add-profile or --checkpoint) reads its profiles as measured")
    return yes


def _profiles(args, profile):
    from mcap.io.jsonio import load_profile
    return [profile] + [load_profile(p) for p in args.add_profile]


def _model(args, profiles):
    from mcap.core.schedules.predict import event_model
    from mcap.runner.orders import generate
    return event_model(profiles, generate)


def _target(args, profile, entries=None):
    """(schedule, G, V) asked, checked against the profile's model and micro-batches;
    ``entries``: a balance's length, which gives G where --stages is not given."""
    name = args.schedule or profile.setup.schedule
    spec = schedules.get(name)
    v = spec.virtual(args.virtual_stages if args.virtual_stages is not None
                     else (profile.setup.virtual_stages if name == profile.setup.schedule
                           else None))
    stages = getattr(args, "stages", None) or \
        (entries // v if entries and entries % v == 0 else profile.setup.stages)
    spec.check(stages, v, profile.setup.chunks, profile.model.num_layers)
    return name, stages, v


def cmd_predict(args, profile) -> int:
    from mcap.cli.options import parse_balance
    from mcap.core.schedules.predict import check_balance
    from mcap.runner.orders import generate
    if not args.balance:
        raise McapError("predict needs --balance (one layer count per pipeline stage)")
    asked = parse_balance(args.balance)
    name, stages, v = _target(args, profile, len(asked))
    al = generate(name, stages, v, profile.setup.chunks)
    balance = check_balance(asked, al.num_chunks, profile.model.num_layers)
    model = _model(args, _profiles(args, profile))
    modes = None
    if getattr(args, "checkpoint", None):
        from mcap.core.setup import checkpoint_modes
        modes = checkpoint_modes(args.checkpoint, al.num_chunks)
    peaks = model.rank_peaks(balance, al, modes)
    if args.json:
        print(json.dumps({"predictor": "events", "schedule": name, "virtual_stages": v,
                          "balance": list(balance), "predicted_peaks": list(peaks),
                          "predicted_peak": max(peaks)}))
        return 0
    print(f"balance {','.join(map(str, balance))} under {name} (V={v}, {stages} ranks): "
          f"predicted peak {fmt_bytes(max(peaks))} ({max(peaks)} bytes; op model of "
          f"{model.schedule})")
    rank_table(al, balance, peaks)
    return 0


def rank_table(al, balance, peaks) -> None:
    from mcap.core.partition import windows
    wins = windows(tuple(balance))
    print("rank  chunks (layers)            predicted peak")
    for r, p in enumerate(peaks):
        held = ", ".join(f"{c}:{wins[c][0]}..{wins[c][1]}" for c in al.placement[r])
        print(f"{r:>4}  {held:<26} {fmt_bytes(p):>14}")


def cmd_recommend(args, profile) -> int:
    from mcap.core.schedules.predict import RankCosts, compare, op_times, search
    from mcap.runner.orders import generate
    if not args.stages:
        raise McapError("recommend needs --stages G (the ranks)")
    profiles = _profiles(args, profile)
    model = _model(args, profiles)
    if args.schedule == "any":
        choices, skipped = compare(model, args.stages, profile.setup.chunks, generate,
                                   op_times(profiles, generate))
        return _print_any(args, choices, skipped, profile)
    name, stages, v = _target(args, profile)
    al = generate(name, stages, v, profile.setup.chunks)
    if getattr(args, "capacity", None) is not None or len(model.modes) > 1:
        return _print_checkpointed(args, model, al, name, v)
    found = search(RankCosts(model, al))
    how = "every partitioning" if found.exhaustive else "a local search (not exhaustive)"
    if args.json:
        print(json.dumps({"method": "exact" if found.exhaustive else "local",
                          "predictor": "events", "schedule": name, "virtual_stages": v,
                          "balance": list(found.balance), "predicted_peaks": list(found.peaks),
                          "predicted_peak": max(found.peaks), "evaluated": found.evaluated}))
        return 0
    print(f"{name} (V={v}) on {stages} ranks: balance {','.join(map(str, found.balance))}, "
          f"predicted peak {fmt_bytes(max(found.peaks))} ({max(found.peaks)} bytes); searched "
          f"{how}, {found.evaluated} candidates")
    rank_table(al, found.balance, found.peaks)
    return 0


def _print_any(args, choices, skipped, profile) -> int:
    if not choices:
        raise McapError("no schedule can be predicted from these profiles: "
                        + "; ".join(skipped))
    batch = profile.setup.batch_size
    if args.json:
        print(json.dumps({"schedules": [
            {"schedule": c.schedule, "virtual_stages": c.virtual, "balance": list(c.balance),
             "predicted_peaks": list(c.peaks), "predicted_peak": c.peak,
             "exhaustive": c.exhaustive, "iteration_seconds": c.seconds, "bubble": c.bubble,
             "samples_per_second": None if not c.seconds else batch / c.seconds}
            for c in choices], "skipped": skipped}))
        return 0
    print(f"schedules for {args.stages} ranks, {profile.setup.chunks} micro-batches, lowest "
          "predicted peak first (time: one iteration replayed from the profile's op times, "
          "bubble included)")
    print("schedule          V  peak          time/iter  bubble  balance")
    for c in choices:
        t = f"{1000 * c.seconds:8.1f} ms" if c.seconds else "        -  "
        b = f"{100 * c.bubble:5.1f}%" if c.bubble is not None else "    - "
        print(f"{c.schedule:<16} {c.virtual:>2}  {fmt_bytes(c.peak):>12}  {t}  {b}  "
              f"{','.join(map(str, c.balance))}")
    for line in skipped:
        print(f"not compared: {line}")
    print(advice(choices))
    return 0


def advice(choices) -> str:
    """Which schedule to use and why, from the ranked choices."""
    best = choices[0]
    timed = [c for c in choices if c.seconds]
    fastest = min(timed, key=lambda c: c.seconds) if timed else None
    text = (f"use {best.schedule} (V={best.virtual}): the lowest predicted peak, "
            f"{fmt_bytes(best.peak)}")
    if fastest is not None and fastest is not best and best.seconds:
        slower = best.seconds / fastest.seconds - 1
        extra = fastest.peak / best.peak - 1
        text += (f"; {fastest.schedule} (V={fastest.virtual}) is {100 * slower:.0f}% faster "
                 f"per iteration but needs {100 * extra:.0f}% more memory on its fullest rank")
    return text


def _print_checkpointed(args, model, al, name: str, v: int) -> int:
    """``recommend --capacity C`` (or profiles of several checkpoint modes): the
    partitioning and which stages checkpoint (``choose_checkpointing``)."""
    from mcap.core.schedules.predict import choose_checkpointing
    cap = getattr(args, "capacity", None)
    got = choose_checkpointing(model, al, cap)
    if args.json:
        print(json.dumps({"schedule": name, "virtual_stages": v, "balance": list(got.balance),
                          "checkpoint": list(got.modes), "predicted_peaks": list(got.peaks),
                          "predicted_peak": got.peak, "recomputed_layer_forwards": got.recomputed,
                          "capacity": cap, "exhaustive": got.exhaustive}))
        return 0
    goal = (f"under {fmt_bytes(cap)} per device, the fewest recomputed layers" if cap is not None
            else "the lowest peak")
    print(f"{name} (V={v}), {goal}: balance {','.join(map(str, got.balance))} with "
          f"--checkpoint {','.join(got.modes)}: predicted peak {fmt_bytes(got.peak)}, "
          f"{got.recomputed} layer forwards recomputed per step"
          + ("" if got.exhaustive else " (local search, not exhaustive)"))
    rank_table(al, got.balance, got.peaks)
    return 0
