"""The largest model that trains under a memory capacity, per partitioner (paper 4.3, Fig. 11).

The paper grows AmoebaNet-D's filters F and binary-searches the largest F for which the
partitioning chosen by mCAP (and by torchgpipe's ``balance_by_time``) trains on its GPUs,
then compares the sizes in trainable parameters (3.61B vs 2.32B, 1.55x). Here each size is
a model spec with one parameter (``--vary``) changed; at each size a partitioner picks a
balance and that balance is measured for real under the capacity (stage processes, the
tracker enforcing ``Setup.capacity_bytes``). "Trains" means the run's status is ok.

* ``mcap``: incremental profiling at that size *under the same capacity* (the paper profiles
  on the devices it will train on; oom profiling runs are replaced by ``profiling``'s
  fallback), then ``exact`` (= mCAP-BF's pick, lowest predicted peak with the tie-break).
  If profiling cannot complete the statistics, that size does not train with mcap
  (status "unprofiled"), unless the oom runs proved so many windows over the capacity
  that at most ``fallback.SPACE_LIMIT`` partitionings are left and profiling measured
  them all: then the best measured one is the pick (no prediction; its ``error`` says so). ``profile_capacity=False`` profiles without the capacity instead
  (as if profiling ran on larger devices; on the CPU the peaks are the same bytes), which
  separates "the pick does not fit" from "the profiling runs do not fit".
  With ``capture`` the profiling runs are at a quarter and a half of the batch size and
  the pick is predicted at the batch size on the batch line (CAPTURE III-A2/B2,
  ``mcap.workflow.capture.batches``): the unbalanced profiling runs then fit under the capacity
  at sizes where they would not at the full batch.
* ``time``: torchgpipe's ``balance_by_time`` on a sample micro-batch.
* ``uniform``, ``params``: the baselines of ``mcap.core.search.baselines``.

Every run goes through the store (``measuring.Measurer``), so an interrupted ``scale``
resumes without repeating a finished run. ``balance_by_time`` re-times the model on a
resume and may pick another balance on a noisy machine; the measured runs are still reused.

The binary search (``bisect``) is pure and assumes "trains" is monotone in the value (as
the paper does); the points it measured are all kept for the chart.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence, TextIO

from mcap.core.errors import McapError
from mcap.core.scaling import (  # noqa: F401  (the records, re-exported for callers)
    MCAP, SCALE_SCHEMA, ScalePoint, ScaleResult, Scaling, bisect, from_dict, report,
    to_dict,
)
from mcap.core.scaling import partitioners as registered
from mcap.core.types import Setup
from mcap.io.scalefile import load, save  # noqa: F401

# Granularity of the parameters a scale may vary (amoebanet-d: filters multiple of 4,
# layers multiple of 3; image sizes multiples of 32); anything else steps by 1.
STEPS = {("amoebanet-d", "filters"): 4, ("amoebanet-d", "layers"): 3,
         ("amoebanet-d", "image_size"): 32, ("vgg11", "image_size"): 32}


# --- the grid and the search (pure) ----------------------------------------------------

def spec_with(spec: str, key: str, value: int) -> str:
    """``spec`` with parameter ``key`` set to ``value``, every parameter spelled out."""
    from mcap.models.spec import keep_trust, normalise_spec, parse_spec

    name, params = parse_spec(spec)
    if key not in params:
        hint = (f" (a Hugging Face model varies the keys its spec writes: {name}:{key}=N)"
                if name.startswith("hf:") else "")
        raise McapError(f"--vary {key}: the model {name!r} has no parameter {key!r}; "
                        f"it has {', '.join(params) or 'none'}{hint}")
    params = dict(params, **{key: int(value)})
    from mcap.models.hfspec import format_value  # hf: lists are written 2/2/2/2
    # The same model with one parameter changed: as trusted as the spec it came from.
    return keep_trust(spec, normalise_spec(f"{name}:" + ",".join(f"{k}={format_value(v)}"
                                                                  for k, v in params.items())))


def value_grid(spec: str, key: str, low: int, high: int, step: Optional[int] = None) -> tuple[int, ...]:
    """The values the search may try: low, low + step, ..., up to high."""
    from mcap.models.spec import parse_spec

    name, _ = parse_spec(spec)
    spec_with(spec, key, low)  # names a missing parameter
    step = STEPS.get((name, key), 1) if step is None else step
    if step < 1:
        raise McapError(f"--step must be >= 1, got {step}")
    if low < 1 or high < low:
        raise McapError(f"need 1 <= --low <= --high, got --low {low} --high {high}")
    granularity = STEPS.get((name, key), 1)
    if low % granularity or step % granularity:
        raise McapError(f"{name} {key} must be a multiple of {granularity}: --low {low} and "
                        f"--step {step} must be too")
    from mcap.core.scaling import check_grid_size
    check_grid_size(low, high, step)  # before the grid is listed (issue 28)
    return tuple(range(low, high + 1, step))


# --- orchestration (real runs) -----------------------------------------------------------

def _pick(partitioner: str, spec: str, setup: Setup, store, timeout: float,
          stream: Optional[TextIO], profile_capacity: bool = True,
          predictor: Optional[str] = None, capture=False):
    """(balance, predicted peak or None, error or None) of ``partitioner`` at ``spec``.

    ``mcap`` profiles and takes ``exact`` under ``predictor``; the others are the search
    registry's baselines of the same name (``time`` with the real model timer)."""
    from mcap.core.recommend import recommend
    from mcap.core.search import DEFAULT
    from mcap.workflow import measuring, profiling

    info = measuring.model_info(spec)
    G = setup.stages
    if partitioner == MCAP:
        try:
            prof_setup = setup if profile_capacity else dataclasses.replace(setup, capacity_bytes=None)
            if capture:  # CAPTURE III-A2: profile at B/4 and B/2, predict at B on the line
                from mcap.core.capture.batchscale import default_sizes
                from mcap.workflow.capture import batches as capture_mod
                sizes = default_sizes(setup.batch_size) if capture is True else tuple(capture)
                result = capture_mod.profile(profiling.ProfileRequest(
                    spec, prof_setup, stream=stream, timeout=timeout, name=f"scale {spec}"),
                    store=store, sizes=sizes)
            else:
                result = profiling.profile(profiling.ProfileRequest(
                    spec, prof_setup, stream=stream, timeout=timeout, name=f"scale {spec}"),
                    store=store)
        except profiling.MissingStatistics as exc:
            # A CAPTURE space was measured at the smaller batch sizes: not a pick at B.
            ok = [] if capture else [r for r in exc.space if r.status == "ok"]
            if not ok:
                return None, None, str(exc)
            # Statistics incomplete, but every partitioning with no stage over the capacity
            # was measured under it: the best of them (mCAP 3.4's order), no prediction.
            best = min(ok, key=lambda r: sorted(r.peaks, reverse=True))
            return best.balance, None, (f"{SPACE_NOTE} ({len(exc.space)} partitionings, "
                                        f"{len(ok)} ok)")
        rec = recommend(result.profile, G, DEFAULT, predictor)
        return rec.balance, rec.predicted_peak, None
    return _baseline_pick(partitioner, spec, info, setup)


def _baseline_pick(partitioner: str, spec: str, info, setup: Setup):
    """(balance, None, error or None) of a registered baseline: its pick needs no
    statistics, so the parameter bytes stand in for the costs it ignores."""
    from mcap.core.costs import AdditiveCosts
    from mcap.core.predict import table_from_arrays
    from mcap.core.recommend import recommend
    from mcap.core.search import SearchContext, get
    from mcap.core.setup import micro_batch

    if partitioner not in registered():
        raise McapError(f"unknown partitioner {partitioner!r}; expected one of "
                        f"{', '.join(registered())}")
    pb = [l.param_bytes for l in info.layers]
    timer = None
    if get(partitioner).needs_model:
        from mcap.runner.timebalance import timer as model_timer
        timer = model_timer(device=setup.device)
    costs = AdditiveCosts(table_from_arrays(pb, pb), "params")
    context = SearchContext(layer_params=tuple(pb), layer_kinds=tuple(l.kind for l in info.layers),
                            spec=spec, micro_batch=micro_batch(setup), timer=timer)
    try:
        rec = recommend(costs, setup.stages, partitioner, context=context)
    except McapError as exc:
        if not get(partitioner).partial:
            raise
        return None, None, str(exc)  # a rule that does not exist at this size (issue 41)
    return rec.balance, None, None


# ScalePoint.error of a pick taken from the measured space instead of a prediction.
SPACE_NOTE = "statistics incomplete; picked the best measured of every partitioning with no stage over the capacity"


def measure_point(partitioner: str, spec: str, value: int, setup: Setup, *, store,
                  timeout: float, stream: Optional[TextIO] = None,
                  profile_capacity: bool = True, predictor: Optional[str] = None,
                  capture=False) -> ScalePoint:
    """Pick with ``partitioner`` at ``spec`` and measure the pick under the capacity."""
    from mcap.workflow import measuring
    from mcap.models import count_parameters
    from mcap.workflow.progress import ProgressBar

    started = time.monotonic()
    params = count_parameters(spec)
    balance, predicted, why = _pick(partitioner, spec, setup, store, timeout, stream,
                                    profile_capacity, predictor, capture)
    if balance is None:
        return ScalePoint(value, spec, params, None, "unprofiled", seconds=time.monotonic() - started,
                          error=why)
    info = measuring.model_info(spec)
    bar = ProgressBar(1, f"scale {partitioner} {value}", stream=stream)
    m = measuring.Measurer(info.spec, info, setup, store, "measure", bar, timeout=timeout)
    try:
        run = m.get(tuple(balance))
    finally:
        m.close()
        bar.close()
    return ScalePoint(value, spec, params, tuple(balance), run.status, run.peaks, predicted,
                      seconds=time.monotonic() - started, error=run.error or why)


def scale(model: str, vary: str, grid: Sequence[int], setup: Setup,
          partitioners: Optional[Sequence[str]] = None, *, store, timeout: float = 300.0,
          stream: Optional[TextIO] = None, profile_capacity: bool = True,
          predictor: Optional[str] = None, capture=False) -> Scaling:
    """Binary-search the largest trainable ``vary`` value for each partitioner; with
    ``capture`` mcap profiles at a quarter and a half of the batch size (True) or at the
    batch sizes given (a sequence) and predicts at the batch size (CAPTURE III-A2)."""
    if capture not in (False, True):
        from mcap.core.capture.batchscale import check_sizes
        capture = check_sizes(capture, setup.batch_size, setup.chunks)
    if setup.capacity_bytes is None:
        raise McapError("scale needs a capacity (Setup.capacity_bytes)")
    partitioners = registered() if partitioners is None else partitioners
    bad = [p for p in partitioners if p not in registered()]
    if bad:
        raise McapError(f"unknown partitioner(s) {', '.join(map(repr, bad))}; expected "
                        f"{', '.join(registered())}")
    results = []
    for part in partitioners:
        points: list[ScalePoint] = []

        def trains(value: int) -> bool:
            point = measure_point(part, spec_with(model, vary, value), value, setup,
                                  store=store, timeout=timeout, stream=stream,
                                  profile_capacity=profile_capacity, predictor=predictor,
                                  capture=capture)
            points.append(point)
            if stream is not None:
                peak = "-" if point.peak is None else f"{point.peak / 2**20:.2f} MiB"
                bal = "-" if point.balance is None else ",".join(map(str, point.balance))
                print(f"scale {part}: {vary}={value} ({point.params:,} parameters) "
                      f"balance {bal}: {point.status}, peak {peak}", file=stream, flush=True)
            return point.status == "ok"

        largest, at_high = bisect(tuple(grid), trains)
        params = next((p.params for p in points if p.value == largest), None)
        results.append(ScaleResult(part, largest, params, tuple(points), at_high))
    return Scaling(model=model, vary=vary, setup=setup, grid=tuple(grid), results=tuple(results),
                   profile_capacity=profile_capacity,
                   capture=capture if capture in (False, True) else list(capture))


# --- report and JSON (mcap.scale/1) ------------------------------------------------------



# --- scale --press: partitioning + MPress plan vs partitioning alone, from predictions ----

def scale_press(model: str, vary: str, grid: Sequence[int], setup: Setup, *, store,
                timeout: float = 300.0, stream: Optional[TextIO] = None,
                predictor: Optional[str] = None, method: str = "milp"):
    """The largest ``vary`` that trains with partitioning alone and with partitioning + an
    MPress plan (``mcap.core.press.scale``): each size is profiled once with MPress's
    statistics (``profile --press``, no capacity: a plan is what lets a size fit) and
    decided from its predictions."""

    from mcap.core.press import joint
    from mcap.core.press import scale as pscale
    from mcap.core.press.jointsearch import floor_of
    from mcap.models import count_parameters
    from mcap.workflow import profiling

    if setup.capacity_bytes is None:
        raise McapError("scale --press needs --capacity BYTES")
    if "press" not in {f.name for f in dataclasses.fields(profiling.ProfileRequest)}:
        raise McapError("scale --press needs profiling with MPress statistics "
                        "(profile --press), which this installation does not have")
    cap, points = setup.capacity_bytes, {}
    unbounded = dataclasses.replace(setup, capacity_bytes=None)

    def point_at(value: int):
        if value not in points:
            spec = spec_with(model, vary, value)
            prof = profiling.profile(profiling.ProfileRequest(
                spec, unbounded, stream=stream, timeout=timeout, name=f"scale --press {spec}",
                press=True), store=store).profile
            peak, floor = floor_of(prof, setup.stages, predictor)
            bal = added = None
            if floor <= cap:
                j = joint(prof, setup.stages, cap, method, predictor)
                bal, added = j.plan.balance, j.plan.predicted_added_seconds
            points[value] = pscale.PressPoint(value, spec, count_parameters(spec), peak, floor,
                                              bal, added)
            if stream is not None:
                print(f"scale --press: {vary}={value}: keep-all {peak:,} B, floor {floor:,} B "
                      f"(capacity {cap:,} B)", file=stream, flush=True)
        return points[value]

    alone, press = pscale.search(grid, point_at, cap)
    return pscale.PressScaling(model, vary, cap, tuple(points.values()), alone, press)
