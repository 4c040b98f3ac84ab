"""MPress's approximated search vs the exact MILP: added time and planning time.

    python bench/bench_press_planner.py            # random cases + bundled-model-shaped cases
    python bench/bench_press_planner.py --quick    # fewer random cases
    python bench/bench_press_planner.py --profile P.json   # also a profile with real press stats
    python bench/bench_press_planner.py --figures [--quick]  # bench/run.py's rows

Random cases: 12-24 layers on 4 stages, saved bytes 0-40 MiB, forward 1-20 ms, GPipe or
1F1B with 2-8 micro-batches, host 20 MB/s-1 GB/s and d2d 0.2-10 GB/s (low enough that many
swaps are not hidden by their live interval), capacity uniform between the smallest reachable
and the keep-all peak. Model-shaped cases: the bundled VGG11, GPT and AmoebaNet-D profiles
(their predicted peaks, mCAP's pick) with constructed statistics (saved bytes 40% of each
layer's measured added memory per micro-batch, forward time proportional to it), checkpoint
"never", with a fast (host 2 GB/s, d2d 10 GB/s) and a slow link (20 MB/s, 200 MB/s: swaps
no longer hidden), at capacities 25/50/75% of the way from the floor to the keep-all peak. Pure:
nothing is measured; the ratios are planner quality under the model (mcap.core.press.model).
"""
from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcap.core.press import problem, problem_from, smallest_capacity, solve  # noqa: E402
from mcap.core.recommend import recommend  # noqa: E402
from mcap.core.types import PressStats  # noqa: E402
from mcap.io import jsonio  # noqa: E402

MiB = 2**20
MODELS = ("vgg11-h512-b8-cpu4", "gpt-l8-h256-cpu4", "amoebanet-d-l6-f64-cpu4")


def random_case(seed: int):
    rng = random.Random(seed)
    L, G = rng.randint(12, 24), 4
    cuts = sorted(rng.sample(range(1, L), G - 1))
    bal = tuple(b - a for a, b in zip([0] + cuts, cuts + [L]))
    saved = [rng.randint(0, 40) * MiB for _ in range(L)]
    fwd = [rng.uniform(0.001, 0.02) for _ in range(L)]
    base = [rng.randint(300, 900) * MiB for _ in range(G)]
    p = problem_from("random", bal, base, rng.choice(["1f1b", "gpipe"]), rng.choice([2, 4, 8]),
                     saved, fwd, rng.choice([2e7, 1e8, 1e9]), rng.choice([2e8, 1e9, 1e10]))
    lo, hi = smallest_capacity(p), max(base)
    return f"random {seed}", p, int(lo + rng.uniform(0, 1) * max(hi - lo, 0))


def constructed(prof, host=2e9, d2d=1e10):
    n, chunks = prof.model.num_layers, prof.setup.chunks
    added = [max(a if a is not None else i, 0) for a, i in zip(prof.stats.mem_added, prof.stats.mem_isolated)]
    saved = tuple(int(0.4 * a) // chunks for a in added)
    top = max(saved) or 1
    fwd = tuple(0.001 + 0.02 * s / top for s in saved)  # larger activations, longer forward
    return dataclasses.replace(prof, setup=dataclasses.replace(prof.setup, checkpoint="never"),
                               press=PressStats(saved, fwd, host, d2d))


def model_cases(extra=()):
    out = []
    for name in MODELS:
        for link, (host, d2d) in (("fast", (2e9, 1e10)), ("slow", (2e7, 2e8))):
            prof = constructed(jsonio.load_profile(ROOT / "data" / f"{name}.profile.json"), host, d2d)
            out.append((f"{name} {link}", prof))
    for path in extra:
        out.append((Path(path).name, jsonio.load_profile(path)))
    cases = []
    for name, prof in out:
        bal = recommend(prof, prof.setup.stages, "exact").balance
        p = problem(prof, bal)
        lo, hi = smallest_capacity(p), max(p.base)
        for f in (0.25, 0.5, 0.75):
            cases.append((f"{name} {f:.0%}", p, int(lo + f * (hi - lo))))
    return cases


def run(cases):
    rows = []
    for name, p, cap in cases:
        got = {}
        for m in ("mpress", "milp"):
            t = time.perf_counter()
            plan = solve(p, cap, m)
            got[m] = (plan.predicted_work_seconds, time.perf_counter() - t, max(plan.predicted_peaks))
            assert got[m][2] <= cap, (name, m)
        rows.append((name, len(p.saved), got["mpress"], got["milp"]))
    return rows


def summary(rows) -> dict:
    """The figures main prints under each table."""
    costly = [(h[0], m[0]) for _, _, h, m in rows if m[0] > 1e-6]
    ratios = sorted(h / m for h, m in costly)
    return {"cases": len(rows), "costly": costly, "ratios": ratios,
            "free": sum(1 for _, _, h, m in rows if m[0] <= 1e-6),
            "free_h": sum(1 for _, _, h, m in rows if m[0] <= 1e-6 and h[0] <= 1e-6),
            "plan_ms": [(1e3 * h[1], 1e3 * m[1]) for *_, h, m in rows]}


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: heuristic vs exact added time on the model-shaped cases and on
    the random ones (``quick``: 20 random cases, else 100), and the plan times."""
    from benchtable import Figure
    n = 20 if quick else 100
    out, times = [], []
    for title, cases in (("model-shaped cases (bundled profiles, constructed statistics)",
                          model_cases()),
                         (f"random cases (seeds 0-{n - 1})", [random_case(s) for s in range(n)])):
        s = summary(run(cases))
        r = s["ratios"]
        total = sum(h for h, _ in s["costly"]) / sum(m for _, m in s["costly"]) if r else 1.0
        out.append(Figure(f"MPress heuristic vs exact MILP plan, predicted added time: {title}",
                          f"{sum(x <= 1.2 for x in r)} of {len(r)} cases with a cost within 1.2x "
                          f"(total {total:.3f}x, max {max(r, default=1.0):.3f}x); "
                          f"{s['cases'] - len(r)} of {s['cases']} cost nothing",
                          "within 1.2x of the exact plan (issue 16)"))
        times += s["plan_ms"]
    out.append(Figure("MPress plan time, mpress heuristic / exact MILP",
                      f"{statistics.median(h for h, _ in times):.1f} ms / "
                      f"{statistics.median(m for _, m in times):.1f} ms (median over "
                      f"{len(times)} cases, one run each)", "none set", timing=True))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--profile", action="append", default=[])
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    args = ap.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    n = 20 if args.quick else 100
    for title, cases in (("random", [random_case(s) for s in range(n)]),
                         ("model-shaped", model_cases(args.profile))):
        rows = run(cases)
        print(f"\n{title}: {len(rows)} cases")
        if title != "random":
            print(f"{'case':<38} {'L':>3} {'mpress +s':>10} {'milp +s':>10} {'ratio':>6} "
                  f"{'mpress ms':>9} {'milp ms':>8}")
            for name, L, h, m in rows:
                r = "-" if m[0] <= 1e-9 and h[0] <= 1e-9 else f"{(h[0] + 1e-9) / (m[0] + 1e-9):.3f}"
                print(f"{name:<38} {L:>3} {h[0]:>10.4f} {m[0]:>10.4f} {r:>6} {1e3 * h[1]:>9.1f} "
                      f"{1e3 * m[1]:>8.1f}")
        s = summary(rows)
        costly, ratios, free, free_h = s["costly"], s["ratios"], s["free"], s["free_h"]
        if ratios:
            q = lambda f: ratios[min(int(f * len(ratios)), len(ratios) - 1)]  # noqa: E731
            print(f"heuristic / exact added time over {len(ratios)} cases with a cost: "
                  f"total {sum(h for h, _ in costly) / sum(m for _, m in costly):.3f}x, "
                  f"median {q(0.5):.3f}, p90 {q(0.9):.3f}, max {ratios[-1]:.3f}; "
                  f"within 1.2x: {sum(r <= 1.2 for r in ratios)}/{len(ratios)}")
        print(f"exact plan adds no time in {free} cases; the heuristic's too in {free_h}")
        print(f"plan time: mpress median {1e3 * statistics.median(h[1] for *_, h, _ in rows):.1f} ms "
              f"(max {1e3 * max(h[1] for *_, h, _ in rows):.1f}), milp median "
              f"{1e3 * statistics.median(m[1] for *_, m in rows):.1f} ms "
              f"(max {1e3 * max(m[1] for *_, m in rows):.1f})")

if __name__ == "__main__":
    main()
