"""Hybrid plans on the command line (CAPTURE III-B, III-C; issue 15's contract):

    python -m mcap recommend --profile FILE --mesh 2x4 [--method exact|enumerate] [--no-prune] [--json]
    python -m mcap predict --profile FILE --plan 3,3,10:tp2 [--mesh 1x4] [--json]

``recommend --mesh`` prints ``plan_text`` (``3,3,10:tp2``), ``plan`` (a list of
``{"layers", "parallel", "degree"}``) and ``predicted_peaks`` (one per device, in stage
order); ``predict --plan`` prints ``predicted_peaks``. ``--stages`` / ``--balance`` keep
meaning pipeline-only. The options are added to the parsers of ``mcap.cli.commands.predict``; the work is
``mcap.core.capture.predict`` and ``hybridcosts``. Bad input (a plan whose layers do not sum to
the model's, or whose degrees do not fit the mesh; a degree the profile cannot predict) exits 2 naming it.
"""
from __future__ import annotations

import json

from mcap.cli.output import line_note
from mcap.core.errors import McapError
from mcap.core.units import fmt_bytes



def only_mesh_methods() -> tuple[str, ...]:
    """``recommend --method`` choices that search only a mesh: the mesh searches' registry
    (``mcap.core.capture.meshsearch``) less the names the pipeline methods share."""
    from mcap.core import search
    from mcap.core.capture import meshsearch
    return tuple(m for m in meshsearch.names() if m not in search.names())


def add_predict_options(p) -> None:
    p.add_argument("--plan", help="a hybrid plan: N for N layers on one device, N:dpK / N:tpK "
                                  "for N layers on K devices, e.g. 3,3,10:tp2 (instead of --balance)")
    p.add_argument("--mesh", help="with --plan: check it fills this mesh NxK (N nodes of K devices)")
    _degree_fit_option(p)


def _degree_fit_option(p) -> None:
    from mcap.core.capture.hybridcosts import DEGREE_FITS
    p.add_argument("--degree-fit", choices=DEGREE_FITS, default=None,
                   help="with --plan / --mesh: dp/tp degrees above the profiled ones from "
                        "M(k) = R + S/k (inverse, the default: replicated plus 1/k sharded "
                        "memory) or CAPTURE III-B3's logarithmic fit (log)")


def add_recommend_options(p) -> None:
    p.add_argument("--mesh", help="recommend a hybrid plan on N nodes of K devices, e.g. 2x4 "
                                  "(instead of --stages; --method exact (DP, default) or enumerate "
                                  "(Algorithm 4))")
    p.add_argument("--no-prune", action="store_true",
                   help="with --mesh --method enumerate: place every config (no pruning)")
    _degree_fit_option(p)


def wants_plan(args) -> bool:
    """True for ``predict --plan``; refuses --balance with --plan and neither."""
    if args.plan is not None and args.balance is not None:
        raise McapError("give --balance (pipeline-only) or --plan (hybrid), not both")
    if args.plan is None:
        if args.balance is None:
            raise McapError("predict needs --balance N,N,... or --plan (e.g. 3,3,10:tp2)")
        if args.mesh is not None:
            raise McapError("--mesh checks a --plan; with --balance give no --mesh")
        if args.degree_fit is not None:
            raise McapError("--degree-fit applies to a hybrid --plan; with --balance give none")
        return False
    return True


def wants_mesh(args) -> bool:
    """True for ``recommend --mesh``; otherwise checks --stages is there and puts the
    default method in (``exact``), refusing mesh-only options."""
    if args.mesh is None:
        if args.stages is None:
            raise McapError("recommend needs --stages G (pipeline-only) or --mesh NxK (hybrid)")
        if args.method in only_mesh_methods():
            raise McapError(f"--method {args.method} searches a mesh; give --mesh NxK, or one of "
                            "the pipeline methods with --stages")
        if args.no_prune:
            raise McapError("--no-prune applies to --mesh --method enumerate")
        if args.degree_fit is not None:
            raise McapError("--degree-fit applies to --mesh (hybrid plans); with --stages give none")
        from mcap.core import search
        args.method = args.method or search.DEFAULT
        return False
    if args.stages is not None:
        raise McapError(f"give --stages {args.stages} (pipeline-only) or --mesh {args.mesh} "
                        "(hybrid), not both")
    return True


def _profile(args):
    from mcap.cli import args as argtypes
    from mcap.io.jsonio import load_profile
    profile = load_profile(args.profile)
    return argtypes.allow_model(profile, getattr(args, "model", None))


def cmd_recommend_mesh(args) -> int:
    from mcap.core.capture.plan import parse_mesh
    from mcap.core.capture import meshsearch
    from mcap.core.capture.predict import recommend_mesh

    mesh = parse_mesh(args.mesh)
    methods = meshsearch.names()
    method = args.method or methods[0]
    if method not in methods:
        raise McapError(f"--method {method} does not search a mesh; with --mesh use "
                        f"{' or '.join(methods)}")
    if args.no_prune and not meshsearch.get(method).prunes:
        raise McapError(f"--no-prune applies to --method "
                        f"{' or '.join(m for m in methods if meshsearch.get(m).prunes)} "
                        f"({method} does not prune)")
    from mcap.app.capture import tp_sizes
    profile = _profile(args)
    rec = recommend_mesh(profile, mesh, method, prune=not args.no_prune,
                         predictor=args.predictor, degree_fit=args.degree_fit or "inverse",
                         batch_size=args.batch_size, tp_sizes=tp_sizes(profile))
    if args.json:
        print(json.dumps(rec.as_json()))
        return 0
    print(f"mesh {mesh.text}, method {rec.method}"
          + (" (no pruning)" if meshsearch.get(method).prunes and not rec.prune else "")
          + f": plan {rec.plan.text}, predicted peak {fmt_bytes(rec.peak)} ({rec.peak} bytes, "
          f"predictor {rec.predictor}{line_note(rec.line)}); {rec.evaluated} configs "
          f"evaluated in {rec.seconds:.3f} s")
    for why in rec.missing:
        print(f"note: {why}")
    from mcap.core.capture.hybridcosts import HybridCosts
    for why in HybridCosts(profile, args.predictor, args.degree_fit or "inverse",
                           batch_size=args.batch_size).extrapolated(rec.plan):
        print(f"note: {why}")
    _device_table(rec.plan, rec.peaks)
    return 0


def cmd_predict_plan(args) -> int:
    from mcap.core.capture.plan import check_plan, parse_mesh, parse_plan
    from mcap.core.capture.hybridcosts import HybridCosts

    from mcap.app.capture import tp_sizes

    plan = parse_plan(args.plan)
    profile = _profile(args)
    hc = HybridCosts(profile, args.predictor, args.degree_fit or "inverse",
                     batch_size=args.batch_size,  # as predict --balance --batch-size
                     tp_sizes=tp_sizes(profile))  # a tp degree must divide heads, hidden, ffn
    # In the model's real layers, also for a merged profile (HybridCosts.peaks maps them).
    check_plan(plan, hc.layers, parse_mesh(args.mesh) if args.mesh else None)
    peaks = hc.peaks(plan)
    notes = hc.extrapolated(plan)  # degrees beyond the profiled ones: said, not hidden
    if args.json:
        print(json.dumps({"predictor": hc.pp_costs().predictor, "plan_text": plan.text,
                          "plan": plan.as_json(), "predicted_peaks": list(peaks),
                          "predicted_peak": max(peaks), "notes": list(notes)}))
        return 0
    print(f"plan {plan.text}: predicted peak {fmt_bytes(max(peaks))} ({max(peaks)} bytes; "
          f"predictor {hc.pp_costs().predictor}{line_note(hc.pp_costs().details)})")
    for why in notes:
        print(f"note: {why}")
    _device_table(plan, peaks)
    return 0


def _device_table(plan, peaks) -> None:
    print("device  stage  layers    parallel   predicted peak")
    first, dev = 0, 0
    for i, s in enumerate(plan.stages):
        kind = s.parallel + (str(s.degree) if s.degree > 1 else "")
        for _ in range(s.degree):
            print(f"{dev:>6}  {i:>5}  {first:>3}..{first + s.layers - 1:<4}  {kind:<9}  "
                  f"{fmt_bytes(peaks[dev]):>14}")
            dev += 1
        first += s.layers
