"""Estimated throughput of a partitioning that was not itself measured (issue 13, item 1:
stage reuse composes a partitioning's peaks from other runs, but its speed was never timed).
Pure.

Model (GPipe, Huang et al. 2019, section 2.2; the bubble the mCAP paper's Fig. 10 trades
against memory): with stage s costing ``t_s`` per micro-batch (forward + backward, the sum of
its layers' times) and M micro-batches, one iteration takes about

    T = (M - 1) * max_s t_s + sum_s t_s

(fill and drain: every micro-batch passes the slowest stage, and one passes them all). 1F1B
has the same bubble in this model. Per-layer times come from torchgpipe's
``profile_times`` on one micro-batch (what ``balance_by_time`` uses), in arbitrary units; one
scale ``k`` (seconds per unit) is fitted as the median of measured iteration seconds over T
on the sweep's measured runs, and the same runs give the estimate's own error, reported
beside it. Communication is not modelled: the estimate is as good as that error says.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.partition import windows
from mcap.core.types import Run


def units(balance: Sequence[int], layer_cost: Sequence[float], chunks: int) -> float:
    """T of the module docstring, in the layer costs' units."""
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(layer_cost, dtype=float))])
    t = [prefix[z + 1] - prefix[a] for a, z in windows(tuple(balance))]
    return (chunks - 1) * max(t) + sum(t)


@dataclass(frozen=True)
class Estimate:
    layer_cost: tuple[float, ...]
    chunks: int
    batch_size: int
    seconds_per_unit: float
    n: int            # measured runs the scale was fitted on
    p50: float        # |estimated - measured| / measured samples/s on those runs
    p90: float
    max: float

    def samples_per_second(self, balance: Sequence[int]) -> float:
        return self.batch_size / (self.seconds_per_unit * units(balance, self.layer_cost,
                                                                self.chunks))

    def as_json(self) -> dict:
        return {"method": "gpipe bubble model over torchgpipe per-layer times (mcap.core.throughput)",
                "layer_cost": list(self.layer_cost), "chunks": self.chunks,
                "batch_size": self.batch_size, "seconds_per_unit": self.seconds_per_unit,
                "fitted_on": self.n, "error_p50": self.p50, "error_p90": self.p90,
                "error_max": self.max}


def fit(runs: Sequence[Run], layer_cost: Sequence[float], chunks: int,
        batch_size: int) -> Optional[Estimate]:
    """The scale from the measured (not composed) ok runs with a throughput; None without."""
    cost = tuple(float(c) for c in layer_cost)
    if any(c < 0 for c in cost) or not any(cost):
        raise McapError("per-layer times must be >= 0 and not all 0")
    timed = [r for r in runs if r.status == "ok" and not r.composed and r.samples_per_second]
    if not timed:
        return None
    u = np.asarray([units(r.balance, cost, chunks) for r in timed])
    seconds = np.asarray([batch_size / r.samples_per_second for r in timed])
    k = float(np.median(seconds / u))
    est = batch_size / (k * u)
    meas = np.asarray([r.samples_per_second for r in timed])
    err = np.abs(est - meas) / meas
    return Estimate(cost, chunks, batch_size, k, len(timed), float(np.percentile(err, 50)),
                    float(np.percentile(err, 90)), float(err.max()))


def from_json(d) -> Optional[Estimate]:
    """An Estimate back from a sweep's ``throughput_estimate`` key (None when absent or
    unreadable: the page then shows measured throughputs only)."""
    if not isinstance(d, dict):
        return None
    try:
        cost = tuple(float(c) for c in d["layer_cost"])
        e = Estimate(cost, int(d["chunks"]), int(d["batch_size"]), float(d["seconds_per_unit"]),
                     int(d["fitted_on"]), float(d["error_p50"]), float(d["error_p90"]),
                     float(d["error_max"]))
    except (KeyError, TypeError, ValueError):
        return None
    ok = all(np.isfinite(c) and c >= 0 for c in cost) and any(cost) and e.chunks >= 1 \
        and e.batch_size >= 1 and np.isfinite(e.seconds_per_unit) and e.seconds_per_unit > 0
    return e if ok else None
