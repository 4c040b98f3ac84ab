"""A CPU profile's prediction for a GPU (``--for cuda``, ``mcap.core.forcuda``) against GPU
measurements of the same setup: issue 30's check.

    python bench/bench_for_cuda.py              # every CPU profile in data/ x every GPU sweep of its setup
    python bench/bench_for_cuda.py --markdown   # as a markdown table, for bench/log/
    python bench/bench_for_cuda.py --figures    # bench/run.py's rows: pairs in data/ only

GPU sweeps are read from data/, ../shared/gpu-h100 and ../shared/gpu-h200 (bundled copies
win). A CPU profile and a GPU sweep pair up when only the device differs. Rows per pair: the
CPU profile's default prediction as it is, ``--for cuda`` (torch's sm90 defaults: the
H100 and H200 are sm90), and ``--for GPU.profile.json`` for every GPU profile of the same
setup and GPU. Columns: Spearman and Kendall of the predicted against the measured peak,
|predicted - measured| / measured of the overall peak and per stage, exact's pick placed as
``bench_predictors`` places it, and the in-sample pick. Pure: nothing is measured.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_predictors import errors_row  # noqa: E402
from mcap.cli.target import target_of  # noqa: E402
from mcap.core import forcuda  # noqa: E402
from mcap.core.evaluate import _kendall_b, _ranks  # noqa: E402
from mcap.core.recommend import costs_of  # noqa: E402
from mcap.core.setup import mismatch  # noqa: E402
from mcap.io import jsonio  # noqa: E402


def files(pattern: str, folders=None) -> list[Path]:
    out, seen = [], set()
    shared = ROOT.parent / "shared"
    for folder in folders or (ROOT / "data", shared / "gpu-h100", shared / "gpu-h200"):
        for f in sorted(folder.glob(pattern)) if folder.is_dir() else ():
            if f.name not in seen:
                seen.add(f.name)
                out.append(f)
    return out


def as_device(dataset, device: str):
    return dataclasses.replace(dataset, setup=dataclasses.replace(dataset.setup, device=device))


def gpu_of(dataset, path: Path) -> str:
    machine = getattr(dataset, "machine", None)
    return machine.gpu if machine is not None and machine.gpu else \
        f"machine unknown, {path.parent.name}"


def triples(folders=None):
    """(CPU profile, GPU sweep, GPU profiles of the sweep's setup and GPU)."""
    profiles = [(p, jsonio.load_profile(p)) for p in files("*.profile.json", folders)]
    sweeps = [(s, jsonio.load_sweep(s)) for s in files("*.sweep.json", folders)]
    for p, prof in profiles:
        if prof.setup.device != "cpu":
            continue
        for s, sweep in sweeps:
            if sweep.setup.device != "cuda" or mismatch(as_device(prof, "cuda"), sweep):
                continue
            gpus = [q for q, g in profiles if g.setup.device == "cuda"
                    and mismatch(g, sweep) is None and gpu_of(g, q) == gpu_of(sweep, s)]
            yield p, prof, s, sweep, gpus


def agreement(costs, sweep) -> tuple[float, float]:
    ok = [r for r in sweep.runs if r.status == "ok" and r.peaks]
    pred = costs.peaks_many(np.asarray([r.balance for r in ok])).max(axis=1).astype(float)
    meas = np.asarray([max(r.peaks) for r in ok], dtype=float)
    return float(np.corrcoef(_ranks(pred), _ranks(meas))[0, 1]), _kendall_b(pred, meas)


def figures(quick: bool = False) -> list:
    """bench/run.py's rows: ``--for cuda`` of every CPU profile in data/ against every GPU
    sweep of its setup in data/ (not ../shared: every checkout gives the same rows). Pure:
    ``quick`` changes nothing."""
    from benchtable import Figure
    out = []
    for p, prof, s, sweep, _ in triples((ROOT / "data",)):
        costs = forcuda.for_cuda(costs_of(prof), prof, forcuda.parse_target("cuda"))
        r = errors_row(costs, sweep, "--for cuda")
        rho, tau = agreement(costs, sweep)
        rank = f"rank {r['rank']}, {r['ratio']}" if r["rank"] != "-" else r["ratio"]
        out.append(Figure(
            f"CPU profile --for cuda, {p.name.removesuffix('.profile.json')} -> "
            f"{s.name.removesuffix('.sweep.json')} ({gpu_of(sweep, s)})",
            f"n={r['n']}: Spearman {rho:.3f}, Kendall {tau:.3f}; overall p90 {r['p90']:.2%}, "
            f"per stage p90 {r['s90']:.2%}; exact's pick {r['pick']} {rank}",
            "Spearman >= 0.9, overall p90 <= 5% (issue 30)"))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--figures", action="store_true", help="print bench/run.py's rows only")
    ap.add_argument("--quick", action="store_true", help="with --figures: the same (pure)")
    args = ap.parse_args(argv)
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return 0
    head = ("| CPU profile | GPU sweep (GPU) | prediction | n | Spearman | Kendall | overall p50 "
            "| p90 | max | per stage p90 | exact's pick | rank | ratio | in-sample pick |")
    if args.markdown:
        print(head)
        print("|" + "---|" * 14)
    for p, prof, s, sweep, gpus in triples():
        fitted = costs_of(prof)
        rows = [("as is (CPU)", fitted),
                ("--for cuda", forcuda.for_cuda(fitted, prof, forcuda.parse_target("cuda")))]
        for g in gpus:
            rows.append((f"--for {g.name}", forcuda.for_cuda(fitted, prof, target_of(str(g), prof))))
        if not args.markdown:
            print(f"\n{p.name} -> {s.name} ({gpu_of(sweep, s)})")
        for label, costs in rows:
            r = errors_row(costs, sweep, label)
            rho, tau = agreement(costs, sweep)
            cells = (f"{r['n']} | {rho:.3f} | {tau:.3f} | {r['p50']:.2%} | {r['p90']:.2%} "
                     f"| {r['max']:.2%} | {r['s90']:.2%} | {r['pick']} | {r['rank']} "
                     f"| {r['ratio']} | {r['sample']:.3f}x")
            if args.markdown:
                print(f"| {p.name} | {s.name} ({gpu_of(sweep, s)}) | {label} | {cells} |")
            else:
                print(f"  {label:<46} {cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
