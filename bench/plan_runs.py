"""Profiling runs needed per (L, G): mCAP's plan here vs the paper's L-G+1 vs CAPTURE.

    python bench/plan_runs.py
    python bench/plan_runs.py --figures    # bench/run.py's row
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

import time

from mcap.core.errors import McapError
from mcap.core.profiling.schedule import profiling_plan

CASES = [(8, 2), (30, 2), (6, 4), (8, 4), (12, 4), (30, 4), (36, 4), (30, 3), (60, 3), (10, 8), (16, 8),
         (24, 8), (30, 8), (100, 8), (200, 16), (1000, 64)]


def runs(L, G, scheme):
    try:
        return str(len(profiling_plan(L, G, scheme).runs))
    except McapError as exc:
        return "n/a (" + str(exc).split(",")[0].replace("the capture scheme ", "") + ")"


def figures(quick: bool = False) -> list:
    """bench/run.py's row: over CASES, how often mCAP's plan needs exactly the paper's L-G+1
    runs, and by how many more where not. Pure: ``quick`` changes nothing."""
    from benchtable import Figure
    equal, more, refused = 0, [], []
    for L, G in CASES:
        m = runs(L, G, "mcap")
        if not m.isdigit():
            refused.append(f"({L}, {G})")
        elif int(m) == L - G + 1:
            equal += 1
        else:
            more.append(f"({L}, {G}) {int(m) - (L - G + 1):+d}")
    planned = len(CASES) - len(refused)
    return [Figure(f"profiling runs of mCAP's plan vs the paper's L-G+1, {len(CASES)} (L, G) "
                   "cases from (8, 2) to (1000, 64)",
                   f"L-G+1 in {equal} of {planned} cases; more in " + ", ".join(more)
                   + (f"; refused (over the layer limit): {', '.join(refused)}" if refused else ""),
                   "L-G+1 (the paper's 3.5)")]


def main():
    if sys.argv[1:2] == ["--figures"]:
        from benchtable import show
        show(figures("--quick" in sys.argv))
        return
    print("| L | G | paper L-G+1 | mcap plan | capture plan | mcap plan time |")
    print("|---|---|---|---|---|---|")
    for L, G in CASES:
        t = time.perf_counter()
        m = runs(L, G, "mcap")
        dt = time.perf_counter() - t
        print(f"| {L} | {G} | {L - G + 1} | {m} | {runs(L, G, 'capture')} | {dt * 1000:.1f} ms |")


if __name__ == "__main__":
    main()
