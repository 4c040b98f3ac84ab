"""Per-device peaks of a few hybrid plans on CPU stage processes (issue 15, engine hybrid).

Archived (issue 27): engine hybrid's first check (issue 15), kept for the record;
bench/bench_hybrid_eval.py measures hybrid plans against their predictions now. Runs as is.

    python bench/archive/bench_hybrid_plans.py [SPEC] [BATCH] [CHUNKS] [PLAN ...]

One runner serves every plan of the same device count; prints each plan's per-device peaks
(MiB), the seconds of its measure call, and the loss of iteration 1 (equal for every plan:
they train the same model on the same micro-batches)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from mcap.core.capture.plan import parse_plan  # noqa: E402
from mcap.core.types import Setup  # noqa: E402
from mcap.runner import open_runner  # noqa: E402

SPEC = "gpt:layers=4,hidden=256,heads=4,vocab=1024,seq=64"
PLANS = ["1,2,2,1", "1,4:dp2,1", "1,4:tp2,1", "3:dp2,3:tp2", "6:dp4", "6:tp4"]


def main(argv: list[str]) -> None:
    spec = argv[1] if len(argv) > 1 else SPEC
    batch = int(argv[2]) if len(argv) > 2 else 8
    chunks = int(argv[3]) if len(argv) > 3 else 2
    plans = argv[4:] or PLANS
    by_devices: dict[int, list[str]] = {}
    for p in plans:
        by_devices.setdefault(parse_plan(p).devices, []).append(p)
    print(f"{spec} batch {batch} chunks {chunks}")
    for devices, group in by_devices.items():
        started = time.monotonic()
        with open_runner(spec, Setup(stages=devices, batch_size=batch, chunks=chunks,
                                     engine="hybrid"), timeout=600) as runner:
            runner.model_info
            print(f"{devices} devices: processes ready in {time.monotonic() - started:.1f} s")
            for p in group:
                t = time.monotonic()
                run = runner.measure_plan(p)
                loss = [r.losses for r in runner.last_results if r.losses]
                peaks = " ".join(f"{x / 2**20:7.2f}" for x in run.peaks or ())
                print(f"  {p:<14} {run.status:<4} {time.monotonic() - t:5.1f} s  "
                      f"loss {loss[0][0] if loss else float('nan'):.4f}  peaks MiB: {peaks}")


if __name__ == "__main__":
    main(sys.argv)
