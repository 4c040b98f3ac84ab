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
  (status "unprofiled"). ``profile_capacity=False`` profiles without the capacity instead
  (as if profiling ran on larger devices; on the CPU the peaks are the same bytes), which
  separates "the pick does not fit" from "the profiling runs do not fit".
* ``time``: torchgpipe's ``balance_by_time`` on a sample micro-batch.
* ``uniform``, ``params``: the baselines of ``mcap.core.search.baselines``.

Every run goes through the store (``profiling.Measurer``), so an interrupted ``scale``
resumes without repeating a finished run. ``balance_by_time`` re-times the model on a
resume and may pick another balance on a noisy machine; the measured runs are still reused.

The binary search (``bisect``) is pure and assumes "trains" is monotone in the value (as
the paper does); the points it measured are all kept for the chart.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence, TextIO, Union

from mcap.core.errors import McapError, SchemaError
from mcap.core.types import Setup

SCALE_SCHEMA = "mcap.scale/1"
PARTITIONERS = ("mcap", "time", "uniform", "params")
# Granularity of the parameters a scale may vary (amoebanet-d: filters multiple of 4,
# layers multiple of 3; image sizes multiples of 32); anything else steps by 1.
STEPS = {("amoebanet-d", "filters"): 4, ("amoebanet-d", "layers"): 3,
         ("amoebanet-d", "image_size"): 32, ("vgg11", "image_size"): 32}


@dataclass(frozen=True)
class ScalePoint:
    """One size measured with one partitioner's pick."""
    value: int
    spec: str
    params: int  # trainable parameters of the model at this size
    balance: Optional[tuple[int, ...]]  # None when no pick could be made (profiling failed)
    status: str  # "ok", "oom", "failed", or "unprofiled" (mcap could not get statistics)
    peaks: Optional[tuple[int, ...]] = None
    predicted_peak: Optional[int] = None
    seconds: float = 0.0
    error: Optional[str] = None

    @property
    def peak(self) -> Optional[int]:
        return max(self.peaks) if self.peaks else None


@dataclass(frozen=True)
class ScaleResult:
    partitioner: str
    largest_value: Optional[int]  # None: not even the smallest value trains
    largest_params: Optional[int]
    points: tuple[ScalePoint, ...]  # in the order measured
    at_high: bool = False  # the largest value of the grid trained: the true limit is higher


@dataclass(frozen=True)
class Scaling:
    model: str  # the base spec; each point's spec changes ``vary``
    vary: str
    setup: Setup
    grid: tuple[int, ...]
    results: tuple[ScaleResult, ...]
    profile_capacity: bool = True  # mcap profiled under the capacity (else without it)

    def result(self, partitioner: str) -> Optional[ScaleResult]:
        return next((r for r in self.results if r.partitioner == partitioner), None)

    def ratio(self, partitioner: str, to: str = "time") -> Optional[float]:
        """Largest trainable size (parameters) of ``partitioner`` over that of ``to``."""
        a, b = self.result(partitioner), self.result(to)
        if a is None or b is None or not a.largest_params or not b.largest_params:
            return None
        return a.largest_params / b.largest_params


# --- the grid and the search (pure) ----------------------------------------------------

def spec_with(spec: str, key: str, value: int) -> str:
    """``spec`` with parameter ``key`` set to ``value``, every parameter spelled out."""
    from mcap.models.spec import keep_trust, normalise_spec, parse_spec

    name, params = parse_spec(spec)
    if key not in params:
        raise McapError(f"--vary {key}: the model {name!r} has no parameter {key!r}; "
                        f"it has {', '.join(params) or 'none'}")
    params = dict(params, **{key: int(value)})
    # The same model with one parameter changed: as trusted as the spec it came from.
    return keep_trust(spec, normalise_spec(f"{name}:" + ",".join(f"{k}={v}" for k, v in params.items())))


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
    return tuple(range(low, high + 1, step))


def bisect(grid: Sequence[int], trains: Callable[[int], bool]) -> tuple[Optional[int], bool]:
    """The largest value of ``grid`` for which ``trains`` holds, assuming it is monotone
    (true up to some value, false after), and whether that is the last grid value.

    Asks the smallest value first (nothing larger can train if it does not), then the
    largest, then halves the gap: about log2(len(grid)) + 2 calls."""
    if not grid:
        raise McapError("the value grid is empty")
    if not trains(grid[0]):
        return None, False
    if len(grid) == 1:
        return grid[0], True
    if trains(grid[-1]):
        return grid[-1], True
    lo, hi = 0, len(grid) - 1  # grid[lo] trains, grid[hi] does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if trains(grid[mid]):
            lo = mid
        else:
            hi = mid
    return grid[lo], False


# --- orchestration (real runs) -----------------------------------------------------------

def _pick(partitioner: str, spec: str, setup: Setup, store, timeout: float,
          stream: Optional[TextIO], profile_capacity: bool = True):
    """(balance, predicted peak or None, error or None) of ``partitioner`` at ``spec``."""
    from mcap.workflow import profiling
    from mcap.core.search import baselines, recommend

    info = profiling.model_info(spec)
    L, G = info.num_layers, setup.stages
    if partitioner == "mcap":
        try:
            prof_setup = setup if profile_capacity else dataclasses.replace(setup, capacity_bytes=None)
            result = profiling.profile(spec, prof_setup, None, store=store, stream=stream,
                                       timeout=timeout, name=f"scale {spec}")
        except profiling.MissingStatistics as exc:
            return None, None, str(exc)
        rec = recommend(result.profile.stats, G, "exact")
        return rec.balance, rec.predicted_peak, None
    if partitioner == "time":
        from mcap.runner.timebalance import time_balance
        micro = max(setup.batch_size // max(setup.chunks, 1), 1)
        return time_balance(spec, G, micro), None, None
    if partitioner == "uniform":
        return baselines.uniform(L, G), None, None
    if partitioner == "params":
        return baselines.params([l.param_bytes for l in info.layers], L, G)[0], None, None
    raise McapError(f"unknown partitioner {partitioner!r}; expected one of {', '.join(PARTITIONERS)}")


def measure_point(partitioner: str, spec: str, value: int, setup: Setup, *, store,
                  timeout: float, stream: Optional[TextIO] = None,
                  profile_capacity: bool = True) -> ScalePoint:
    """Pick with ``partitioner`` at ``spec`` and measure the pick under the capacity."""
    from mcap.workflow import profiling
    from mcap.models import count_parameters
    from mcap.workflow.progress import ProgressBar

    started = time.monotonic()
    params = count_parameters(spec)
    balance, predicted, why = _pick(partitioner, spec, setup, store, timeout, stream,
                                    profile_capacity)
    if balance is None:
        return ScalePoint(value, spec, params, None, "unprofiled", seconds=time.monotonic() - started,
                          error=why)
    info = profiling.model_info(spec)
    bar = ProgressBar(1, f"scale {partitioner} {value}", stream=stream)
    m = profiling.Measurer(info.spec, info, setup, store, "measure", bar, timeout=timeout)
    try:
        run = m.get(tuple(balance))
    finally:
        m.close()
        bar.close()
    return ScalePoint(value, spec, params, tuple(balance), run.status, run.peaks, predicted,
                      seconds=time.monotonic() - started, error=run.error)


def scale(model: str, vary: str, grid: Sequence[int], setup: Setup,
          partitioners: Sequence[str] = PARTITIONERS, *, store, timeout: float = 300.0,
          stream: Optional[TextIO] = None, profile_capacity: bool = True) -> Scaling:
    """Binary-search the largest trainable ``vary`` value for each partitioner."""
    if setup.capacity_bytes is None:
        raise McapError("scale needs a capacity (Setup.capacity_bytes)")
    bad = [p for p in partitioners if p not in PARTITIONERS]
    if bad:
        raise McapError(f"unknown partitioner(s) {', '.join(map(repr, bad))}; expected "
                        f"{', '.join(PARTITIONERS)}")
    results = []
    for part in partitioners:
        points: list[ScalePoint] = []

        def trains(value: int) -> bool:
            point = measure_point(part, spec_with(model, vary, value), value, setup,
                                  store=store, timeout=timeout, stream=stream,
                                  profile_capacity=profile_capacity)
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
                   profile_capacity=profile_capacity)


# --- report and JSON (mcap.scale/1) ------------------------------------------------------

def report(s: Scaling) -> str:
    cap = s.setup.capacity_bytes
    lines = [f"largest trainable {s.model} by {s.vary} on {s.setup.stages} stages under "
             f"{cap / 2**20:.2f} MiB per stage (mcap profiled "
             f"{'under the capacity' if s.profile_capacity else 'without the capacity'}):"]
    for r in s.results:
        if r.largest_value is None:
            lines.append(f"  {r.partitioner:<8} none: {s.vary}={s.grid[0]} already does not train")
            continue
        ratio = s.ratio(r.partitioner)
        more = " (the highest value tried; the limit is higher)" if r.at_high else ""
        lines.append(f"  {r.partitioner:<8} {s.vary}={r.largest_value}, {r.largest_params:,} parameters"
                     + (f", {ratio:.2f}x time" if ratio is not None else "") + more)
    return "\n".join(lines)


def to_dict(s: Scaling) -> dict:
    return {"schema": SCALE_SCHEMA, "model": s.model, "vary": s.vary,
            "setup": dataclasses.asdict(s.setup), "grid": list(s.grid),
            "profile_capacity": s.profile_capacity,
            "results": [{"partitioner": r.partitioner, "largest_value": r.largest_value,
                         "largest_params": r.largest_params, "at_high": r.at_high,
                         "ratio_to_time": s.ratio(r.partitioner),
                         "points": [_point_dict(p) for p in r.points]} for r in s.results]}


def _point_dict(p: ScalePoint) -> dict:
    return {"value": p.value, "spec": p.spec, "params": p.params,
            "balance": None if p.balance is None else list(p.balance), "status": p.status,
            "peaks": None if p.peaks is None else [int(x) for x in p.peaks],
            "predicted_peak": p.predicted_peak, "seconds": p.seconds, "error": p.error}


def from_dict(d, source: str = "<scale>") -> Scaling:
    """Read ``mcap.scale/1``; SchemaError naming the file and the problem otherwise."""
    if not isinstance(d, dict) or d.get("schema") != SCALE_SCHEMA:
        found = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise SchemaError(f"{source}: expected schema {SCALE_SCHEMA!r}, found {found!r}")
    try:
        raw = dict(d["setup"])
        if "backend" in raw and "device" not in raw:  # files written before device was renamed
            raw["device"] = raw.pop("backend")
        setup = Setup(**raw)
        results = tuple(
            ScaleResult(r["partitioner"], r["largest_value"], r["largest_params"],
                        tuple(ScalePoint(p["value"], p["spec"], p["params"],
                                         None if p["balance"] is None else tuple(p["balance"]),
                                         p["status"],
                                         None if p["peaks"] is None else tuple(p["peaks"]),
                                         p.get("predicted_peak"), float(p.get("seconds", 0.0)),
                                         p.get("error"))
                              for p in r["points"]),
                        bool(r.get("at_high", False)))
            for r in d["results"])
        return Scaling(model=d["model"], vary=d["vary"], setup=setup,
                       grid=tuple(int(v) for v in d["grid"]), results=results,
                       profile_capacity=bool(d.get("profile_capacity", True)))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
        raise SchemaError(f"{source}: not a valid {SCALE_SCHEMA} file ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None


def save(s: Scaling, path: Union[str, Path]) -> Path:
    """Write atomically (``mcap.io.outputs.write_text``: temp file, fsync, rename)."""
    from mcap.io.outputs import write_text
    return write_text(path, json.dumps(to_dict(s), indent=1) + "\n")


def load(path: Union[str, Path]) -> Scaling:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # huge integers, deep nesting
        raise SchemaError(f"{path}: not usable JSON ({type(exc).__name__})") from None
    return from_dict(d, str(path))
