"""``python -m mcap evaluate`` and ``python -m mcap scale`` (issue 6, paper section 4).

    python -m mcap evaluate --profile P.json --sweep S.json [--json] [--predictor NAME]
    python -m mcap scale --model amoebanet-d:layers=6 --vary filters --stages 4 \\
        --capacity 24MiB --partitioner mcap --partitioner time [setup options] --low 8 --high 64

``evaluate`` is pure except for the ``time`` method (torchgpipe's balance_by_time times the
real model), which is included when torch and torchgpipe import and the profile's device is
here (a CUDA profile on a machine without CUDA), and reported as left out, with the reason,
otherwise (exit 0: every other method still runs). ``scale`` measures for real, recording every run in the store.
"""
from __future__ import annotations

import json

from mcap.cli import args as argtypes
from mcap.cli.options import (
    add_predictor_option, add_setup_options, executor_env, search_context, setup_from_args,
)
from mcap.core.errors import McapError
from mcap.models.spec import UntrustedCode


def register(sub) -> None:
    p = sub.add_parser("evaluate", help="prediction error and where each method's pick lands in a sweep",
                       description="Over a sweep's ok runs: |predicted - measured| / measured "
                                   "(median, p90, p99, max), and for each registered method (mCAP's "
                                   "searches and the baselines: time, DeepSpeed's uniform, params "
                                   "and type, torchtitan's titan, Megatron-LM's megatron) its pick, "
                                   "the measured peak of its fullest device, rank and ratio to the "
                                   "measured best (paper 4.2).")
    p.add_argument("--profile", required=True, type=argtypes.in_path, help="a mcap.profile/1 JSON file")
    p.add_argument("--sweep", required=True, type=argtypes.in_path, help="a mcap.sweep/1 JSON file of the same model and setup")
    add_predictor_option(p)
    from mcap.cli.deep import add_blocks_option
    add_blocks_option(p)
    p.add_argument("--no-time", action="store_true",
                   help="skip the time method (it imports torch and times the model)")
    p.add_argument("--seed", type=argtypes.seed, default=0, help="seed for bo")
    argtypes.add_confirm_model_option(p, "evaluate")
    from mcap.core.search.bayes import MAX_ITERATIONS
    p.add_argument("--bo-iterations", default=75, metavar="N",
                   type=argtypes.bounded_int(MAX_ITERATIONS, "--bo-iterations",
                                             "bo refits its surrogate on every evaluation"),
                   help="bo evaluations (paper: 75; skopt needs at least 10)")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument("--strict", action="store_true",
                   help="refuse (exit 2) a profile and a sweep measured on different machines "
                        "instead of warning")
    p.add_argument("--add-profile", action="append", default=[], metavar="FILE",
                   help="another profile of the same model and setup under another schedule: "
                        "a sweep of a multi-stage schedule, or of one the profile was not "
                        "measured under, is evaluated rank by rank from the profiles' op "
                        "timelines (mcap.core.schedules)")
    p.set_defaults(func=cmd_evaluate)
    _register_scale(sub)


def _register_scale(sub) -> None:
    from mcap.core.scaling import partitioners
    s = sub.add_parser("scale", help="largest model that trains under a capacity, per partitioner "
                                     "(paper 4.3, Fig. 11)",
                       description="Binary-search the largest value of --vary for which the "
                                   "partitioner's pick trains (status ok) under --capacity: "
                                   "profile (mcap), recommend, measure at each size.")
    add_setup_options(s)
    add_predictor_option(s)
    s.add_argument("--vary", default="filters", help="the model parameter to grow (default filters)")
    s.add_argument("--partitioner", action="append", choices=partitioners(), default=None,
                   help="repeatable; default: all of " + ", ".join(partitioners()))
    s.add_argument("--low", type=argtypes.integer, required=True, help="smallest value of --vary to try")
    s.add_argument("--high", type=argtypes.integer, required=True, help="largest value of --vary to try")
    s.add_argument("--step", type=argtypes.integer, default=None,
                   help="values are low + k*step (default: the model's granularity, 4 for filters)")
    s.add_argument("--profile-capacity", choices=("same", "none"), default="same",
                   help="mcap's profiling runs: under the same capacity (default, as on real "
                        "devices) or without it")
    s.add_argument("--capture", action="store_true",
                   help="mcap profiles at a quarter and a half of --batch-size and predicts at "
                        "it on the batch line (CAPTURE III-A2), so its profiling fits the cap")
    s.add_argument("--profile-batch-sizes", default=None, metavar="B1,B2",
                   help="like --capture, at these batch sizes (each a multiple of --chunks)")
    s.add_argument("--out", type=argtypes.out_path, default=None, metavar="FILE.json",
                   help="write the mcap.scale/1 result here (checked before any run: never the "
                        "store, a folder or a file of another kind; an existing mcap.scale/1 "
                        "file is replaced)")
    s.add_argument("--press", action="store_true",
                   help="largest size with partitioning + an MPress plan vs partitioning "
                        "alone, from predictions (profiles each size with --press)")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_scale)


# --- evaluate ------------------------------------------------------------------------

def _model_pick(profile, stages: int, method: str, predictor: str):
    """The pick of a method that times the real model (``needs_model``: torchgpipe's
    balance_by_time), or (None, why)."""
    from mcap.core.recommend import recommend
    from mcap.core.search.time import NoDevice
    try:
        return recommend(profile, stages, method, predictor,
                         context=search_context(profile, method)), ""
    except NoDevice as exc:  # a CUDA profile here without CUDA: left out, said why
        return None, f"left out: {exc}"
    except UntrustedCode:
        from mcap.models.spec import untrusted_note
        spec = profile.model.spec
        return None, untrusted_note(spec, f"python -m mcap evaluate --model {spec} ...")
    except McapError as exc:  # e.g. a model too large to build here: it is unavailable
        return None, f"{method} unavailable: {exc}"


def evaluation_json(ev) -> dict:
    e = ev.errors
    return {"spec": ev.spec, "stages": ev.stages, "runs": ev.runs, "ok": ev.ok,
            "best": {"balance": list(ev.best_balance), "peak": ev.best_peak},
            "error": {"predictor": e.predictor, "count": e.count, "median": e.median,
                      "p90": e.p90, "p99": e.p99, "max": e.max, "within_5pct": e.within_goal,
                      "within_14pct": e.within_paper, "under_predicted": e.under},
            "methods": [{"method": m.method,
                         "balance": None if m.balance is None else list(m.balance),
                         "predicted_peak": m.predicted_peak, "measured_peak": m.measured_peak,
                         "rank": m.rank, "ratio": m.ratio, "note": m.note} for m in ev.picks]}


def _pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def _mib(n) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MiB"


def print_evaluation(ev) -> None:
    e = ev.errors
    print(f"{ev.spec}, {ev.stages} stages: {ev.ok} ok of {ev.runs} measured partitionings; "
          f"lowest measured peak {_mib(ev.best_peak)} ({'-'.join(map(str, ev.best_balance))})")
    print(f"prediction error ({e.predictor}), |pred - meas| / meas over {e.count} partitionings:")
    print(f"  median {_pct(e.median)}  p90 {_pct(e.p90)}  p99 {_pct(e.p99)}  max {_pct(e.max)}")
    print(f"  within 5%: {_pct(e.within_goal)}  within 14%: {_pct(e.within_paper)}  "
          f"predicted below measured: {e.under}")
    print("method   pick            predicted      measured       rank   ratio")
    notes = []  # a method that did not run: why, under the table (too long for a cell)
    for m in ev.picks:
        bal = "-" if m.balance is None else "-".join(map(str, m.balance))
        rank = "-" if m.rank is None else f"{m.rank}/{ev.ok}"
        ratio = "-" if m.ratio is None else f"{m.ratio:.3f}x"
        measured = _mib(m.measured_peak) if m.measured_peak is not None else (m.note or "-")
        if m.balance is None and m.note and len(m.note) > 24:
            measured = "not run"
            notes.append(f"{m.method}: {m.note}")
        line = f"{m.method:<8} {bal:<15} {_mib(m.predicted_peak):>12}  {measured:>12}  {rank:>7}  {ratio:>6}"
        if m.note and m.measured_peak is not None:
            line += f"  ({m.note})"
        print(line)
    for note in notes:
        print(note)


def cmd_evaluate(args) -> int:
    from mcap.core import search
    from mcap.core.evaluate import check_measured, evaluate, pure_picks
    from mcap.core.setup import check_compatible
    from mcap.io.jsonio import load_profile, load_sweep

    profile, sweep = load_profile(args.profile), load_sweep(args.sweep)
    from mcap.core.schedules.predict import is_multi
    if args.add_profile or is_multi(sweep.setup) or is_multi(profile.setup) \
            or sweep.setup.schedule != profile.setup.schedule:
        return _evaluate_ranks(args, profile, sweep)
    from mcap.cli.deep import deepened
    profile = deepened(profile, args.blocks, like=sweep.model)
    check_compatible(profile, sweep)
    machines = _machines(profile, sweep, args.strict)
    check_measured(sweep)  # before any search: a sweep with nothing to compare exits 2 at once
    stages = sweep.setup.stages
    unavailable = []  # (method, why): a rule that does not exist here, a model not timed
    picks = list(pure_picks(profile, stages, predictor=args.predictor, seed=args.seed,
                            bo_iterations=args.bo_iterations, refused=unavailable))
    for method in search.names(needs_model=True):  # they time the real model
        if args.no_time:
            unavailable.append((method, "skipped (--no-time)"))
            continue
        rec, why = _model_pick(argtypes.allow_model(profile, args.model), stages, method,
                               args.predictor)
        if rec is None:
            unavailable.append((method, why))
        else:
            picks.append(rec)
    ev = evaluate(profile, sweep, picks, predictor=args.predictor, unavailable=unavailable)
    if args.json:
        print(json.dumps({**evaluation_json(ev), "machines": machines}))
    else:
        print_evaluation(ev)
    return 0


def _machines(profile, sweep, strict: bool) -> dict:
    """Where the profile and the sweep were measured (issue 11): a warning on stderr when
    they are different machines whose peaks may differ, McapError (exit 2) with --strict."""
    import sys

    from mcap.core.machine import describe, mismatch
    warning = mismatch(profile.machine, sweep.machine)
    if warning and strict:
        raise McapError(warning + " (--strict)")
    if warning:
        print(f"mcap: warning: {warning}", file=sys.stderr)
    return {"profile": describe(profile.machine), "sweep": describe(sweep.machine),
            "warning": warning}


# --- scale ---------------------------------------------------------------------------

def _sizes(text):
    if text is None:
        return None
    from mcap.core import numbers
    sizes = tuple(numbers.whole(t) for t in text.split(","))  # ASCII digits only
    if None in sizes:
        raise McapError(f"--profile-batch-sizes {text[:80]!r}: expected batch sizes separated "
                        "by commas, e.g. 8,12")
    return sizes


def cmd_scale(args) -> int:
    import sys

    from mcap.workflow import measuring
    from mcap.workflow import scaling
    from mcap.io.outputs import OutputError, check_out
    from mcap.store import Store
    from mcap.store.opening import resolve_path

    setup = setup_from_args(args)
    if setup.capacity_bytes is None:
        raise McapError("scale needs --capacity BYTES: the largest trainable size is only "
                        "defined under a memory limit")
    if args.press:
        from mcap.cli.commands.press import cmd_scale_press
        return cmd_scale_press(args, setup)
    from mcap.workflow.capture.batches import sizes_from_args
    sizes = sizes_from_args(args.batch_size, _sizes(args.profile_batch_sizes), args.capture)
    capture = False if sizes is None else (True if args.capture else sizes)
    parts = tuple(dict.fromkeys(args.partitioner or scaling.registered()))
    grid = scaling.value_grid(args.model, args.vary, args.low, args.high, args.step)
    store_path = resolve_path(args.store)
    if args.out is not None:
        check_out(args.out, scaling.SCALE_SCHEMA, store=store_path)  # before any run
    store = Store(store_path)
    try:
        with measuring.sigterm_cancels(), executor_env(args):
            result = scaling.scale(args.model, args.vary, grid, setup, parts, store=store,
                                   timeout=args.timeout, stream=sys.stderr,
                                   profile_capacity=args.profile_capacity == "same",
                                   predictor=args.predictor, capture=capture)
    except measuring.Cancelled:
        print("mcap: scale cancelled; finished runs are kept in the store", file=sys.stderr)
        return 143
    finally:
        store.close()
    if args.out is not None:
        try:
            check_out(args.out, scaling.SCALE_SCHEMA, store=store_path)  # again, right before
            scaling.save(result, args.out)
        except OutputError as exc:
            raise OutputError(f"{exc}. Nothing was written; every run is kept in the store "
                              f"({store_path}): run the command again with another --out to "
                              f"write it; nothing is measured twice") from None
        except OSError as exc:
            raise OutputError(f"could not write {args.out}: {exc.strerror or exc}. Every run is "
                              f"kept in the store ({store_path}): run the same command again "
                              f"to write it; nothing is measured twice") from None
    if args.json:
        print(json.dumps(scaling.to_dict(result)))
    else:
        print(scaling.report(result))
    return 0


def _evaluate_ranks(args, profile, sweep) -> int:
    """A sweep of any schedule, rank by rank from the profiles' op model (issue 39)."""
    from mcap.core.schedules.predict import evaluate as evaluate_ranks, event_model
    from mcap.io.jsonio import load_profile
    from mcap.runner.orders import generate
    profiles = [profile] + [load_profile(p) for p in args.add_profile]
    model = event_model(profiles, generate)
    if sweep.model != profile.model:
        raise McapError(f"the profile is of {profile.model.spec!r} but the sweep of "
                        f"{sweep.model.spec!r}")
    from mcap.core.schedules.predict import SHARED_FIELDS
    bad = [f"{f} {getattr(profile.setup, f)!r} vs {getattr(sweep.setup, f)!r}"
           for f in SHARED_FIELDS if getattr(profile.setup, f) != getattr(sweep.setup, f)]
    if bad:
        raise McapError("the profile and the sweep were measured under setups whose ops "
                        "differ (profile vs sweep): " + "; ".join(bad))
    machines = _machines(profile, sweep, args.strict)
    ev = evaluate_ranks(model, sweep, generate)
    row = {"schedule": ev.schedule, "virtual_stages": ev.virtual,
           "partitionings": ev.partitionings, "ranks": ev.ranks,
           "error": {"median": ev.median, "p90": ev.p90, "max": ev.max, "exact": ev.exact},
           "pick": {"balance": list(ev.pick), "predicted_peak": ev.pick_predicted,
                    "measured_peak": ev.pick_measured, "rank": ev.pick_rank, "ratio": ev.ratio,
                    "exhaustive": ev.exhaustive},
           "best": {"balance": list(ev.best), "peak": ev.best_peak}, "machines": machines,
           "unpredicted": [list(b) for b in ev.unpredicted]}
    if args.json:
        print(json.dumps(row))
        return 0
    print(f"{sweep.model.spec}, {ev.schedule} (V={ev.virtual}), {sweep.setup.stages} ranks: "
          f"{ev.partitionings} measured partitionings, {ev.ranks} ranks; predicted from the op "
          f"model of {model.schedule}")
    print(f"per-rank error |pred - meas| / meas: median {_pct(ev.median)}  p90 {_pct(ev.p90)}  "
          f"max {_pct(ev.max)}; exact to the byte {ev.exact}/{ev.ranks}")
    if ev.unpredicted:
        print(f"not predicted ({len(ev.unpredicted)}): the profiles give no reading of a chunk "
              f"of {', '.join('-'.join(map(str, b)) for b in ev.unpredicted[:5])}"
              + (" ..." if len(ev.unpredicted) > 5 else ""))
    where = ("not in the sweep" if ev.pick_measured is None else
             f"measured {_mib(ev.pick_measured)}, rank {ev.pick_rank}/{ev.partitionings}, "
             f"{ev.ratio:.3f}x the best")
    print(f"pick ({'every partitioning' if ev.exhaustive else 'local search'}): "
          f"{'-'.join(map(str, ev.pick))}, predicted {_mib(ev.pick_predicted)}, {where}; best "
          f"measured {'-'.join(map(str, ev.best))} at {_mib(ev.best_peak)}")
    return 0
