"""What commands print, shared by several: a measured run as JSON (``measure``, the
torchrun drivers, node 0 of a multi-node run), a CAPTURE plan's run, the note on where a
batch line came from, a stage table, and keeping a measured run in the store without ever
losing the printed result. Imports no command module (no import cycle)."""
from __future__ import annotations

import sys

from mcap.core.errors import McapError
from mcap.core.partition import windows
from mcap.core.types import Run
from mcap.core.units import fmt_bytes


def run_json(run: Run) -> dict:
    """What ``measure`` prints: status, per-stage peaks (bytes), the worst, timing."""
    out = {"balance": list(run.balance), "status": run.status,
           "peaks": list(run.peaks) if run.peaks else None, "peak": run.peak,
           "seconds": round(run.seconds, 3),
           "samples_per_second": (round(run.samples_per_second, 3)
                                  if run.samples_per_second else None)}
    if run.estimated:
        out["samples_per_second_estimated"] = True
    if run.error:
        out["error"] = run.error
    if run.breakdown:
        out["breakdown"] = [{"weights": b.weights, "gradients": b.gradients,
                             "optimizer": b.optimizer, "other": b.other} for b in run.breakdown]
    return out


def plan_json(plan, run: Run) -> dict:
    """``measure --plan``'s JSON: ``run_json`` (peaks per device, in stage order) plus the
    CAPTURE plan's text, stages and device count."""
    out = run_json(run)
    out.update(plan_text=plan.text, plan=plan.as_json(), devices=plan.devices)
    return out


def mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def line_note(details) -> str:
    """Where the batch line came from (CAPTURE III-B2), when it did: ``details`` of the
    stage costs (``batchscale.LineCosts``)."""
    line = (details or {}).get("batch_line")
    if not line:
        return ""
    return (f"; at batch size {line['target']} on the line through batch sizes "
            f"{line['from'][0]} and {line['from'][1]}")


def stage_table(balance, peaks) -> None:
    print("stage  layers     predicted peak")
    for i, ((a, z), p) in enumerate(zip(windows(balance), peaks)):
        print(f"{i:>5}  {a:>3}..{z:<4}  {fmt_bytes(p):>14}")


def keep_measured(store, record, show):
    """``record()`` the measured run, then ``show()`` it; an McapError from the record (a
    StoreError: the run is then in the recovery file, named in it) is returned, after the
    result is shown, for the command to exit 2 with: a measured run is always printed."""
    try:
        record()
        unsaved = None
    except McapError as exc:
        unsaved = exc
    show()
    sys.stdout.flush()
    return unsaved
