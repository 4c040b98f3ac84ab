"""How closely CPU stage processes stand in for a GPU (issue 11, item 6): the rank agreement of
two sweeps of the same partitionings, by measured peak.

    python bench/bench_cpu_vs_gpu.py                 # bundled CPU full sweep vs ../shared H100 one
    python bench/bench_cpu_vs_gpu.py A.sweep.json B.sweep.json [--out X.agreement.json]
    python bench/bench_cpu_vs_gpu.py --figures       # bench/run.py's row: CPU full sweep vs the
                                                     # bundled H200 sample (stages alone)

Prints Spearman, Kendall's tau-b, where A's lowest-peak partitionings rank in B (and the
reverse) and how many of the two top-36 lists are shared. ``--out`` writes the figures as
``mcap.agreement/1`` for the dashboard's Partition-space page. Pure: nothing is measured.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mcap.core.evaluate import rank_agreement  # noqa: E402
from mcap.core.machine import describe  # noqa: E402
from mcap.io import agreement, jsonio  # noqa: E402

CPU = ROOT / "data" / "vgg11-h512-b8-cpu4-full.sweep.json"
GPU = ROOT.parent / "shared" / "gpu-h100" / "vgg11-h512-b8-h100x4-full.sweep.json"


def line(name: str, r) -> str:
    lo, hi = r.best_ranks
    rank = f"{lo}" if lo == hi else f"{lo}-{hi}"
    ratio = f"{r.best_ratios[0]:.3f}x" if lo == hi else \
        f"{r.best_ratios[0]:.3f}-{r.best_ratios[1]:.3f}x"
    return (f"{name}: n={r.n} Spearman {r.spearman:.3f} Kendall {r.kendall:.3f}; the "
            f"{r.best_ties} partitioning(s) tied lowest rank {rank} in the other ({ratio}); "
            f"top-{r.top} lists share {r.top_shared}")


def label(sweep, path) -> str:
    if sweep.machine is not None:
        return describe(sweep.machine)
    return f"{sweep.setup.device} ({Path(path).name}; machine not recorded)"


H200 = ROOT / "data" / "vgg11-h512-b8-h200x4-alone-sample150-seed5.sweep.json"


def figures(quick: bool = False) -> list:
    """bench/run.py's row: the bundled CPU full sweep against the bundled H200 sample of the
    same setup (stages run alone: the clean GPU data), over the partitionings both measured.
    Pure: ``quick`` changes nothing."""
    from benchtable import Figure
    r = rank_agreement(jsonio.load_sweep(CPU).runs, jsonio.load_sweep(H200).runs)
    lo, hi = r.best_ranks
    rank = f"{lo}" if lo == hi else f"{lo}-{hi}"
    return [Figure(f"CPU stage processes as a stand-in for a GPU: rank agreement, "
                   f"{CPU.name.removesuffix('.sweep.json')} vs "
                   f"{H200.name.removesuffix('.sweep.json')}",
                   f"n={r.n}: Spearman {r.spearman:.3f}, Kendall {r.kendall:.3f}; the CPU's "
                   f"lowest peak ranks {rank} on the H200 ({r.best_ratios[0]:.3f}x its lowest)",
                   "Spearman >= 0.9 (issue 11 item 6)")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's row only")
    ap.add_argument("--quick", action="store_true", help="with --figures: the same (pure)")
    ap.add_argument("a", nargs="?", default=str(CPU))
    ap.add_argument("b", nargs="?", default=str(GPU))
    ap.add_argument("--out", help="write the figures as *.agreement.json")
    ap.add_argument("--note", default="", help="a sentence stored with the figures")
    ap.add_argument("--a-label", help="what A was measured on (default: its machine record)")
    ap.add_argument("--b-label", help="what B was measured on (default: its machine record)")
    args = ap.parse_args(argv)
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return 0
    a, b = jsonio.load_sweep(args.a), jsonio.load_sweep(args.b)
    fields = ("stages", "batch_size", "chunks", "schedule", "checkpoint")
    if a.model.spec != b.model.spec or any(getattr(a.setup, f) != getattr(b.setup, f)
                                           for f in fields):
        print(f"the sweeps are of different models or setups: {a.model.spec} {a.setup} vs "
              f"{b.model.spec} {b.setup}", file=sys.stderr)
        return 2
    ab, ba = rank_agreement(a.runs, b.runs), rank_agreement(b.runs, a.runs)
    print(line(f"A={Path(args.a).name} in B={Path(args.b).name}", ab))
    print(line("reverse", ba))
    if args.out:
        s = a.setup
        d = agreement.to_dict(
            ab, ba, model=a.model.spec, a=args.a_label or label(a, args.a),
            b=args.b_label or label(b, args.b),
            setup=f"{s.stages} stages, batch {s.batch_size}, {s.chunks} micro-batches, {s.schedule}",
            note=args.note, command="python bench/bench_cpu_vs_gpu.py " + " ".join(
                [Path(args.a).name, Path(args.b).name, "--out", Path(args.out).name]
                + (["--b-label", repr(args.b_label)] if args.b_label else [])))
        agreement.save(d, Path(args.out))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
