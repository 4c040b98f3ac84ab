"""Fuzz every file reader with seeded mutations of the bundled JSON files (issue 12), and
every reader of the store with seeded mutations of its rows (issue 28).

    PYTHONPATH=. python bench/bench_fuzz.py [--count 500] [--seed 0] [--time-count 100]
                                            [--store-count 500] [--recovery-count 300]
                                            [--link-count 540]
                                            [--only files|store|recovery|links]

Feeds ``--count`` mutated inputs (types, signs, sizes, nesting, truncation, byte noise,
encodings; tests/io/fuzzing.py) to each reader: the JSON loader for profiles and sweeps, an
upload, and the CLI commands that read a file (predict, recommend, evaluate with a mutated
profile and with a mutated sweep), in-process. ``recommend --method time`` times the real
model on every valid input (seconds each), so it gets ``--time-count``. Prints the tally of
exit codes per reader and every finding (an exit other than 0 or 2, or a traceback); exits
1 if there is any. Target: 0 findings.

The store-row fuzzer (tests/io/fuzzing.py, ``run_store``) writes a store with a row in every
table (two profiles, a sweep, runs with times and breakdowns, stages run alone, a job,
machines), then ``--store-count`` times changes one column of one row (the columns taken in
turn: every column of every table; CHECK constraints off, as another program could) and runs
every reader: the Store API, the resume logic, the dashboard's listing and loading, and
``export`` (whose file must then load). Each reader must return or exit 2 (McapError).

The recovery-file fuzzer (tests/store/recoveryfuzz.py, issue 38; ``--recovery-count``,
default 300, ``--only recovery`` alone) lays out ``STORE.recovery.jsonl`` as mutated lines,
a link to a victim file (also one holding valid lines), a dangling link, a hard link, a
FIFO, a folder, a file another user could have written, a linked ``-wal`` / ``-shm`` /
``-journal``, an oversized file, and opens the store read-write (the import) or appends a
run to it. Each must return or exit 2; every victim keeps its bytes, no dangling target is
created, the planted secret is never printed, and the lines not imported stay byte for byte.
The dashboard-link fuzzer (tests/pages/linkfuzz.py, ``--only links``; issue 38 item 6)
opens a page by a link whose one shared key (every key of ``pages._state.SHARED_KEYS``, in
turn, each on the pages that read it) holds a mutated value: ``--link-count`` links in
all, AppTest. A finding is an exception box, or a value the page does not use as given
without a warning naming the key (a silent replacement). Target: 0 of each.

``--figures [--quick]`` prints bench/run.py's row: the defaults above, seed 0 (``--quick``:
100 inputs per reader, 5 for recommend --method time, 40 store-row mutations).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.io import fuzzing  # noqa: E402


def fuzz(count: int, time_count: int, seed: int, store_count: int, only=None) -> tuple:
    """Every reader fuzzed, its tally printed as it finishes: (inputs, findings, store-row
    readers, readers of files)."""
    total, found, readers = 0, [], 0
    print(f"{'reader':<20} {'inputs':>7} {'exit 0':>7} {'exit 2':>7} {'other':>6} {'seconds':>8}")
    with tempfile.TemporaryDirectory(prefix="mcap-fuzz-") as tmp:
        for reader in (() if only == "store" else fuzzing.READERS):
            n = time_count if reader == "recommend-time" else count
            started = time.monotonic()
            tally, findings = fuzzing.run(reader, n, seed, Path(tmp))
            other = sum(v for k, v in tally.items() if k not in (0, 2))
            print(f"{reader:<20} {n:>7} {tally.get(0, 0):>7} {tally.get(2, 0):>7} {other:>6} "
                  f"{time.monotonic() - started:>8.1f}", flush=True)
            total += n
            found += findings
        if only != "files":
            started = time.monotonic()
            tally, findings, per_table = fuzzing.run_store(store_count, seed, Path(tmp))
            other = sum(v for k, v in tally.items() if k not in (0, 2))
            readers = len(fuzzing.store_readers(Path(tmp) / 'x', Path(tmp)))
            print(f"{'store rows':<20} {store_count:>7} {tally.get(0, 0):>7} "
                  f"{tally.get(2, 0):>7} {other:>6} {time.monotonic() - started:>8.1f}  "
                  f"(mutations x {readers} "
                  f"readers)", flush=True)
            print("  mutations per table: " + ", ".join(f"{t} {n}" for t, n in per_table.items()))
            total += store_count
            found += findings
    print(f"total: {total} inputs, {len(found)} findings (tracebacks or other exit codes)")
    for f in found[:50]:
        print("  " + f)
    return total, found, readers


def fuzz_recovery(count: int, seed: int) -> tuple:
    """The recovery-file fuzzer (module docstring), its tally printed: (cases, findings)."""
    from tests.store import recoveryfuzz
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcap-fuzz-recovery-") as tmp:
        tally, found, per_kind = recoveryfuzz.run(count, seed, Path(tmp))
    other = sum(v for k, v in tally.items() if k not in (0, 2))
    print(f"{'recovery file':<20} {count:>7} {tally.get(0, 0):>7} {tally.get(2, 0):>7} "
          f"{other:>6} {time.monotonic() - started:>8.1f}")
    print("  cases per kind: " + ", ".join(f"{k} {n}" for k, n in per_kind.items()))
    print(f"recovery file: {count} cases, {len(found)} findings (tracebacks, victims changed, "
          "secrets printed, lines changed)")
    for f in found[:50]:
        print("  " + f)
    return count, found
# --- dashboard links (issue 38, item 6): a self-contained section ------------------------

def fuzz_links(count: int, seed: int) -> tuple[int, list[str]]:
    """Every shared key of a dashboard link fuzzed (module docstring): prints the tally per
    key and every finding; (links tried, findings)."""
    import os
    from tests.pages import linkfuzz
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcap-fuzz-links-") as tmp:
        saved = os.environ.get("MCAP_STORE")
        os.environ["MCAP_STORE"] = str(Path(tmp) / "store.sqlite")  # an empty store of its own
        try:
            tally, found = linkfuzz.run(count, seed)
        finally:
            if saved is None:
                os.environ.pop("MCAP_STORE", None)
            else:
                os.environ["MCAP_STORE"] = saved
    boxes = sum(1 for f in found if "exception box" in f or "Error" in f.split(":", 2)[1])
    total = sum(tally.values())
    print(f"{'dashboard links':<20} {total:>7} links over {len(tally)} keys "
          f"({', '.join(f'{k} {n}' for k, n in tally.items())}); "
          f"{boxes} exception boxes, {len(found) - boxes} silent replacements; "
          f"{time.monotonic() - started:.0f} s", flush=True)
    for f in found[:50]:
        print("  " + f)
    return total, found


def figures(quick: bool = False) -> list:
    """bench/run.py's row (module docstring)."""
    from benchtable import Figure
    count, time_count, store_count = (100, 5, 40) if quick else (500, 100, 500)
    total, found, readers = fuzz(count, time_count, 0, store_count)
    return [Figure("fuzzed inputs to every file reader and every store reader: findings "
                   "(tracebacks, exits other than 0 and 2)",
                   f"{len(found)} of {total:,} inputs, seed 0: {len(fuzzing.READERS)} file "
                   f"readers x {count} ({time_count} for recommend --method time) and "
                   f"{store_count} store-row mutations x {readers} readers",
                   "0 (issues 12, 28)")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=500, help="inputs per reader (default 500)")
    ap.add_argument("--time-count", type=int, default=100,
                    help="inputs for recommend --method time (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store-count", type=int, default=500,
                    help="store-row mutations, each read by every store reader (default 500)")
    ap.add_argument("--recovery-count", type=int, default=300,
                    help="recovery-file cases, links included (default 300)")
    ap.add_argument("--only", choices=("files", "store", "recovery", "links"), default=None)
    ap.add_argument("--link-count", type=int, default=540,
                    help="dashboard links, spread over every shared key (default 540)")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's row only")
    ap.add_argument("--quick", action="store_true", help="with --figures: fewer inputs")
    args = ap.parse_args()
    if args.figures:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchtable import show
        show(figures(args.quick))
        return 0
    if args.only == "links":
        _, found = fuzz_links(args.link_count, args.seed)
        return 1 if found else 0
    found = []
    if args.only != "recovery":
        _, found, _ = fuzz(args.count, args.time_count, args.seed, args.store_count, args.only)
    if args.only in (None, "recovery"):
        found = found + fuzz_recovery(args.recovery_count, args.seed)[1]
    return 1 if found else 0

if __name__ == "__main__":
    sys.exit(main())
