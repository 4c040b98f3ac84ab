"""The scaling comparison table (paper 4.3, Fig. 11) from a ``mcap.scale/1`` result.

    python -m mcap scale ... --out data/amoebanet-d-cpu4.scale.json    # measures (minutes)
    python bench/bench_scaling.py data/amoebanet-d-cpu4.scale.json      # prints the tables
    python bench/bench_scaling.py --figures        # bench/run.py's rows: every bundled scale file

For each partitioner: every size the binary search measured (value, parameters, balance,
status, measured peak, mCAP's predicted peak where it has one, seconds spent), then the
largest trainable size and its ratio to ``time`` (torchgpipe's balance_by_time; paper:
mCAP 1.55x).
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcap.workflow.scaling import load, report  # noqa: E402


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: the largest trainable size per partitioner in every bundled
    ``*.scale.json`` (measured when the file was made: data/PROVENANCE.md). Pure: ``quick``
    changes nothing."""
    from benchtable import Figure
    out = []
    for path in sorted((Path(__file__).resolve().parents[1] / "data").glob("*.scale.json")):
        s = load(path)
        cells = []
        for r in s.results:
            ratio = s.ratio(r.partitioner)
            if r.largest_value is None:
                cells.append(f"{r.partitioner}: none trains")
                continue
            cells.append(f"{r.partitioner} {s.vary}={r.largest_value} ({r.largest_params:,} "
                         "parameters" + (f", {ratio:.2f}x balance_by_time's" if ratio is not None
                                         and r.partitioner != "time" else "") + ")")
        out.append(Figure(
            f"largest trainable {s.model} under {s.setup.capacity_bytes / 2**20:.0f} MiB a stage "
            f"({path.name.removesuffix('.scale.json')}; mCAP profiled "
            f"{'under' if s.profile_capacity else 'without'} the capacity)",
            "; ".join(cells) + ("" if any(r.partitioner == "time" for r in s.results) else
                                "; no balance_by_time result in the file"),
            "mCAP over balance_by_time: the paper's 1.55x (4.3, Fig. 11)"))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--figures"]:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from benchtable import show
        show(figures("--quick" in argv))
        return 0
    if len(argv) != 1:
        print(__doc__)
        return 2
    s = load(argv[0])
    cap = s.setup.capacity_bytes
    print(f"{s.model}, vary {s.vary}, {s.setup.stages} stages, batch {s.setup.batch_size} in "
          f"{s.setup.chunks} micro-batches, capacity {cap / 2**20:.2f} MiB per stage")
    total = 0.0
    for r in s.results:
        print(f"\n{r.partitioner}: {len(r.points)} sizes measured")
        print(f"  {s.vary:>8} {'params':>12} {'balance':<12} {'status':<10} {'peak MiB':>9} "
              f"{'pred MiB':>9} {'seconds':>8}")
        for p in sorted(r.points, key=lambda p: p.value):
            bal = "-".join(map(str, p.balance)) if p.balance else "-"
            peak = f"{p.peak / 2**20:.2f}" if p.peak is not None and p.status == "ok" else "-"
            pred = f"{p.predicted_peak / 2**20:.2f}" if p.predicted_peak is not None else "-"
            print(f"  {p.value:>8} {p.params:>12,} {bal:<12} {p.status:<10} {peak:>9} {pred:>9} "
                  f"{p.seconds:>8.1f}")
            total += p.seconds
    print()
    print(report(s))
    print(f"\nwall time of the measured points: {total / 60:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
