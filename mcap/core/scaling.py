"""The records of a scaling experiment (paper 4.3, Fig. 11) and the pure parts of it: the
binary search over a value grid, the report, and the ``mcap.scale/1`` JSON form. Pure: no
torch, no files (``mcap.io.scalefile`` reads and writes them; ``mcap.workflow.scaling``
measures them)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from mcap.core.errors import McapError, SchemaError
from mcap.core.types import Setup

SCALE_SCHEMA = "mcap.scale/1"
MCAP = "mcap"  # mCAP itself: profile at each size, then the default search method


def partitioners() -> tuple[str, ...]:
    """What ``scale --partitioner`` may compare: mCAP, then every registered search method
    whose pick needs no statistics (``uses_costs`` False: the baselines; ``time`` is the
    paper's, 4.3), in the registry's order."""
    from mcap.core import search
    return (MCAP, *search.names(uses_costs=False))


def reference() -> str:
    """The partitioner mCAP's largest size is compared with (the ``reference`` method)."""
    from mcap.core import search
    return search.reference()


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
    # mcap profiled at other batch sizes and predicted at B (CAPTURE III-A2): True for B/4
    # and B/2, a list for the sizes given, False for mCAP's profiling at B.
    capture: object = False

    def result(self, partitioner: str) -> Optional[ScaleResult]:
        return next((r for r in self.results if r.partitioner == partitioner), None)

    def ratio(self, partitioner: str, to: Optional[str] = None) -> Optional[float]:
        """Largest trainable size (parameters) of ``partitioner`` over that of ``to``
        (default: the reference baseline, :func:`reference`)."""
        a, b = self.result(partitioner), self.result(to or reference())
        if a is None or b is None or not a.largest_params or not b.largest_params:
            return None
        return a.largest_params / b.largest_params



# --- the search (pure) ------------------------------------------------------------------

# Values a grid may hold (issue 28): the search bisects it (about log2(n) + 2 points are
# measured), but the grid is listed in memory and saved in the mcap.scale/1 file.
MAX_GRID = 100_000


def check_grid_size(low: int, high: int, step: int) -> int:
    """The number of values of low, low + step, ..., up to high; McapError naming the
    flags above MAX_GRID, before anything is listed."""
    n = 0 if high < low else (high - low) // step + 1
    if n > MAX_GRID:
        raise McapError(f"--low {low} --high {high} --step {step} is a grid of {n:,} values, "
                        f"above the limit of {MAX_GRID:,}; give a larger --step or a narrower "
                        f"range")
    return n

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



# --- report and JSON (mcap.scale/1) ------------------------------------------------------

def report(s: Scaling) -> str:
    cap = s.setup.capacity_bytes
    lines = [f"largest trainable {s.model} by {s.vary} on {s.setup.stages} stages under "
             f"{cap / 2**20:.2f} MiB per stage (mcap profiled "
             f"{'under the capacity' if s.profile_capacity else 'without the capacity'}"
             f"{_capture_words(s.capture)}):"]
    for r in s.results:
        if r.largest_value is None:
            lines.append(f"  {r.partitioner:<8} none: {s.vary}={s.grid[0]} already does not train")
            continue
        ratio = s.ratio(r.partitioner)
        more = " (the highest value tried; the limit is higher)" if r.at_high else ""
        lines.append(f"  {r.partitioner:<8} {s.vary}={r.largest_value}, {r.largest_params:,} parameters"
                     + (f", {ratio:.2f}x {reference()}" if ratio is not None else "") + more)
    return "\n".join(lines)


def _capture_words(capture) -> str:
    if capture is True:
        return ", at a quarter and a half of the batch size"
    if capture:
        return f", at batch sizes {','.join(map(str, capture))}"
    return ""


def to_dict(s: Scaling) -> dict:
    return {"schema": SCALE_SCHEMA, "model": s.model, "vary": s.vary,
            # Setup.press (a measured MPress plan) only when set: files stay as before.
            "setup": {k: v for k, v in dataclasses.asdict(s.setup).items()
                      if k != "press" or v}, "grid": list(s.grid),
            "profile_capacity": s.profile_capacity,
            "capture": list(s.capture) if isinstance(s.capture, (tuple, list)) else bool(s.capture),
            "results": [{"partitioner": r.partitioner, "largest_value": r.largest_value,
                         "largest_params": r.largest_params, "at_high": r.at_high,
                         "ratio_to_time": s.ratio(r.partitioner),
                         "points": [_point_dict(p) for p in r.points]} for r in s.results]}


def _point_dict(p: ScalePoint) -> dict:
    return {"value": p.value, "spec": p.spec, "params": p.params,
            "balance": None if p.balance is None else list(p.balance), "status": p.status,
            "peaks": None if p.peaks is None else [int(x) for x in p.peaks],
            "predicted_peak": p.predicted_peak, "seconds": p.seconds, "error": p.error}


def _capture_of(v):
    if isinstance(v, (list, tuple)) and all(isinstance(b, int) and not isinstance(b, bool) for b in v):
        return tuple(v)
    return v is True


def from_dict(d, source: str = "<scale>") -> Scaling:
    """Read ``mcap.scale/1``; SchemaError naming the file and the problem otherwise."""
    if not isinstance(d, dict) or d.get("schema") != SCALE_SCHEMA:
        found = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise SchemaError(f"{source}: expected schema {SCALE_SCHEMA!r}, found {found!r}")
    if isinstance(d.get("grid"), list) and len(d["grid"]) > MAX_GRID:
        raise SchemaError(f"{source}: the grid has {len(d['grid']):,} values, above the limit "
                          f"of {MAX_GRID:,}")
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
                       profile_capacity=bool(d.get("profile_capacity", True)),
                       capture=_capture_of(d.get("capture")))
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError) as exc:
        raise SchemaError(f"{source}: not a valid {SCALE_SCHEMA} file ({type(exc).__name__}: "
                          f"{str(exc)[:200]})") from None
