"""The estimated throughput of composed partitionings (issue 13, item 1), checked on the
measured runs of every bundled stage-reuse sweep.

    python bench/bench_throughput_estimate.py            # print the estimate's error per sweep
    python bench/bench_throughput_estimate.py --write    # also store it in the sweep files

Per-layer times come from torchgpipe's profiler on this machine (``mcap.runner.timebalance
.layer_times``); the scale is fitted on the sweep's measured runs, and the error printed is
|estimated - measured| / measured samples/s on those runs (``mcap.core.throughput``).
``--write`` adds the ``throughput_estimate`` key to each sweep (the runs are unchanged).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcap.io import jsonio  # noqa: E402
from mcap.workflow.estimate import KEY, estimate  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", help="default: every bundled sweep with composed runs")
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    paths = [Path(p) for p in args.sweeps] or sorted((ROOT / "data").glob("*.sweep.json"))
    for path in paths:
        sweep = jsonio.load_sweep(path)
        composed = sum(r.composed for r in sweep.runs)
        if not composed:
            continue
        t0 = time.perf_counter()
        est = estimate(sweep.model, sweep.setup, sweep.runs)
        if est is None:
            print(f"{path.name}: no estimate (no measured run with a throughput)")
            continue
        print(f"{path.name}: {composed} composed; fitted on {est['fitted_on']} measured runs, "
              f"error p50 {100 * est['error_p50']:.1f}% p90 {100 * est['error_p90']:.1f}% max "
              f"{100 * est['error_max']:.1f}% ({time.perf_counter() - t0:.1f} s)")
        if args.write:
            extra = dict(sweep.extra or {})
            extra[KEY] = est
            import dataclasses
            jsonio.save(dataclasses.replace(sweep, extra=extra), path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
