"""The estimated throughput of composed partitionings (issue 13, item 1), checked on the
measured runs of every bundled stage-reuse sweep.

    python bench/bench_throughput_estimate.py            # print the estimate's error per sweep
    python bench/bench_throughput_estimate.py --write    # also store it in the sweep files
    python bench/bench_throughput_estimate.py --figures  # bench/run.py's row (writes nothing)

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


def figures(quick: bool = False) -> list:
    """bench/run.py's row: the estimate's p90 error on every bundled sweep with composed runs.
    Its per-layer times are timed on this machine now, so the figure varies run to run;
    ``quick`` changes nothing."""
    from benchtable import Figure
    p90, none = [], []
    for path in sorted((ROOT / "data").glob("*.sweep.json")):
        sweep = jsonio.load_sweep(path)
        if not any(r.composed for r in sweep.runs):
            continue
        est = estimate(sweep.model, sweep.setup, sweep.runs)
        if est is None:  # no measured run with a throughput
            none.append(path.name.removesuffix(".sweep.json"))
        else:
            p90.append((est["error_p90"], path.name.removesuffix(".sweep.json")))
    p90.sort()
    (lo, lo_name), (hi, hi_name) = p90[0], p90[-1]
    return [Figure(f"throughput estimate of composed partitionings: error on the measured runs, "
                   f"p90 per bundled sweep",
                   f"{100 * lo:.1f}% ({lo_name}) to {100 * hi:.1f}% ({hi_name}), median "
                   f"{100 * p90[len(p90) // 2][0]:.1f}% over {len(p90)} sweeps"
                   + (f" ({', '.join(none)}: no estimate)" if none else "")
                   + "; per-layer times timed now (one run)",
                   "reported: a rough guide (issue 13 item 1)", timing=True)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sweeps", nargs="*", help="default: every bundled sweep with composed runs")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's row only")
    ap.add_argument("--quick", action="store_true", help="with --figures: the same")
    args = ap.parse_args(argv)
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return 0
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
