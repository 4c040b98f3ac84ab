"""Fuzz every file reader with seeded mutations of the bundled JSON files (issue 12).

    PYTHONPATH=. python bench/bench_fuzz.py [--count 500] [--seed 0] [--time-count 100]

Feeds ``--count`` mutated inputs (types, signs, sizes, nesting, truncation, byte noise,
encodings; tests/fuzzing.py) to each reader: the JSON loader for profiles and sweeps, an
upload, and the CLI commands that read a file (predict, recommend, evaluate with a mutated
profile and with a mutated sweep), in-process. ``recommend --method time`` times the real
model on every valid input (seconds each), so it gets ``--time-count``. Prints the tally of
exit codes per reader and every finding (an exit other than 0 or 2, or a traceback); exits
1 if there is any. Target: 0 findings.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import fuzzing  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=500, help="inputs per reader (default 500)")
    ap.add_argument("--time-count", type=int, default=100,
                    help="inputs for recommend --method time (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    total, found = 0, []
    print(f"{'reader':<20} {'inputs':>7} {'exit 0':>7} {'exit 2':>7} {'other':>6} {'seconds':>8}")
    with tempfile.TemporaryDirectory(prefix="mcap-fuzz-") as tmp:
        for reader in fuzzing.READERS:
            n = args.time_count if reader == "recommend-time" else args.count
            started = time.monotonic()
            tally, findings = fuzzing.run(reader, n, args.seed, Path(tmp))
            other = sum(v for k, v in tally.items() if k not in (0, 2))
            print(f"{reader:<20} {n:>7} {tally.get(0, 0):>7} {tally.get(2, 0):>7} {other:>6} "
                  f"{time.monotonic() - started:>8.1f}", flush=True)
            total += n
            found += findings
    print(f"total: {total} inputs, {len(found)} findings (tracebacks or other exit codes)")
    for f in found[:50]:
        print("  " + f)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
