"""Estimated throughput for the partitionings a stage-reuse sweep composed (issue 13, item
1): per-layer times from torchgpipe's profiler (``mcap.runner.timebalance.layer_times``),
the bubble model and its scale fitted on the sweep's measured runs
(``mcap.core.throughput``). The result rides in the sweep's ``throughput_estimate`` key
(file and store); the composed runs themselves keep ``samples_per_second`` null, so an
estimate is never mistaken for a measurement."""
from __future__ import annotations

from typing import Optional, Sequence, TextIO

from mcap.core import throughput
from mcap.core.setup import micro_batch
from mcap.core.types import ModelInfo, Run, Setup

KEY = "throughput_estimate"


def estimate(info: ModelInfo, setup: Setup, runs: Sequence[Run], *,
             stream: Optional[TextIO] = None, timeout: float = 1.0) -> Optional[dict]:
    """The ``throughput_estimate`` JSON for ``runs``, or None when no run was composed, no
    measured run has a throughput to fit the scale on, or timing the layers failed (said on
    ``stream``; the sweep itself is kept either way)."""
    if not any(r.composed and r.status == "ok" for r in runs):
        return None
    if not any(r.status == "ok" and not r.composed and r.samples_per_second for r in runs):
        return None
    from mcap.runner.timebalance import layer_times
    try:
        cost = layer_times(info.spec, micro_batch(setup), timeout=timeout, device=setup.device,
                           threads=setup.threads)
        est = throughput.fit(runs, cost, setup.chunks, setup.batch_size)
    except Exception as exc:  # noqa: BLE001 - an estimate is optional; the sweep is not
        if stream is not None:
            print(f"sweep: no throughput estimate for composed runs ({type(exc).__name__}: "
                  f"{str(exc).splitlines()[0] if str(exc) else ''})", file=stream)
        return None
    if est is None:
        return None
    if stream is not None:
        print(f"sweep: composed runs' throughput estimated from per-layer times (error on the "
              f"{est.n} measured runs: p50 {100 * est.p50:.1f}%, p90 {100 * est.p90:.1f}%)",
              file=stream)
    return est.as_json()
