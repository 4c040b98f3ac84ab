"""Run the kept benchmarks and rewrite the current-figures table of BENCHMARKS.md (issue 27).

    python bench/run.py --quick              # every benchmark, small samples (a few minutes)
    python bench/run.py                      # full samples (longer; adds full-only figures)
    python bench/run.py --only search,bo     # some benchmarks; every other row is kept
    python bench/run.py --quick --dry-run    # run and print the table; write nothing
    python bench/run.py --list               # the benchmarks, their commands and modes

Each benchmark is a script of bench/ with ``figures(quick) -> list[Figure]``; it runs in a
process of its own (``python bench/SCRIPT.py --figures [--quick]`` prints the same figures),
so one benchmark's crash, hang (``timeout``) or environment cannot touch another. Each
figure becomes a row: figure, target, value, command, machine, date. Only the part of
BENCHMARKS.md between ``<!-- current:begin -->`` and ``<!-- current:end -->`` is rewritten,
through a temporary file and a rename; the dated log below is left as it is. Which rows are
replaced and which are kept: ``bench/benchtable.py``. A benchmark that fails gets a row
"failed: <reason>" and the others are still written; the exit status is then 1.

Timing figures (a time, or computed from times measured now) vary run to run: their value
says over how many runs (median of N) and the load average when the benchmark started.
Every other figure comes from bundled data or seeded inputs and repeats exactly.

Exit status: 0 when every benchmark run gave its figures, 1 when one failed (its row says
why), 2 on bad arguments or a BENCHMARKS.md without its two markers (nothing is run then).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))

from benchtable import (FAILED, Figure, MarkerError, Row, machine, merge, parse,  # noqa: E402
                        render, rewrite, split, write_atomic)


@dataclass(frozen=True)
class Bench:
    name: str
    script: str  # in bench/
    quick: bool = False  # --quick takes smaller samples (the command shows --quick)
    full_only: bool = False  # skipped under --quick
    timeout: float = 600.0  # seconds for its process

    @property
    def path(self) -> str:
        return f"bench/{self.script}"

    def command(self, quick: bool) -> str:
        return f"python {self.path} --figures" + (" --quick" if quick and self.quick else "")


# Table order. Measured ``quick`` sizes: bench/README.md.
BENCHES = (
    Bench("predictors", "bench_predictors.py"),
    Bench("for-cuda", "bench_for_cuda.py"),
    Bench("gpu-truth", "bench_gpu_truth.py"),
    Bench("cpu-vs-gpu", "bench_cpu_vs_gpu.py"),
    Bench("evaluate", "bench_evaluate.py"),
    Bench("search", "bench_search.py", quick=True),
    Bench("bo", "bench_bo.py", quick=True),
    Bench("plan-runs", "plan_runs.py"),
    Bench("mesh", "bench_mesh.py", quick=True),
    Bench("sweep-reuse", "bench_sweep_reuse.py", quick=True, timeout=1800),
    Bench("throughput", "bench_throughput_estimate.py"),
    Bench("stage-times", "bench_stage_times.py", quick=True, timeout=1200),
    Bench("store", "bench_store.py", quick=True),
    Bench("startup", "bench_measure_startup.py", quick=True),
    Bench("pages", "bench_pages.py", quick=True),
    Bench("press-planner", "bench_press_planner.py", quick=True),
    Bench("press-eval", "bench_press_eval.py"),
    Bench("hybrid-eval", "bench_hybrid_eval.py"),
    Bench("scaling", "bench_scaling.py"),
    Bench("fuzz", "bench_fuzz.py", quick=True, timeout=1800),
)
BY_NAME = {b.name: b for b in BENCHES}


def child(name: str, quick: bool, out: Path) -> int:
    """In the benchmark's own process: its figures as JSON into ``out``."""
    import importlib
    import traceback

    sys.path.insert(0, str(ROOT))
    try:
        module = importlib.import_module(Path(BY_NAME[name].script).stem)
        figs = module.figures(quick=quick)
        payload = {"figures": [f.__dict__ for f in figs]}
        code = 0
    except BaseException as exc:  # noqa: BLE001 (any failure is the row's reason)
        traceback.print_exc()
        text = str(exc).strip().splitlines()
        payload = {"error": f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")}
        code = 1
    out.write_text(json.dumps(payload))
    return code


def run_one(b: Bench, quick: bool) -> tuple[list[Figure], str, float]:
    """(figures, failure reason or '', seconds) of one benchmark in its own process."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])}
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="mcap-bench-") as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, str(BENCH / "run.py"), "--child", b.name, "--out", str(out)]
        try:
            done = subprocess.run(cmd + (["--quick"] if quick else []), cwd=ROOT, env=env,
                                  stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                  timeout=b.timeout)
        except subprocess.TimeoutExpired:
            return [], f"timed out after {b.timeout:.0f} s", time.monotonic() - started
        seconds = time.monotonic() - started
        if not out.exists():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return [], f"exit {done.returncode}: {last[:200]}", seconds
        got = json.loads(out.read_text())
    if "error" in got:
        return [], got["error"][:300], seconds
    figs = [Figure(**f) for f in got["figures"]]
    if not figs:
        return [], "no figures", seconds
    return figs, "", seconds


def rows_of(b: Bench, quick: bool, figs: list[Figure], reason: str, load: float,
            where: str, date: str) -> list[Row]:
    command = f"`{b.command(quick)}`"
    if reason:
        return [Row(f"{b.name}: every figure", "-", FAILED + reason, command, where, date)]
    return [Row(f.name, f.target, f.value + (f"; load {load:.1f}" if f.timing else ""),
                command, where, date) for f in figs]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small samples (a few minutes)")
    ap.add_argument("--only", action="append", default=[], metavar="NAME[,NAME]",
                    help="run these benchmarks only (repeatable; --list names them)")
    ap.add_argument("--dry-run", action="store_true",
                    help="run and print the table, but leave BENCHMARKS.md as it is")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    ap.add_argument("--file", type=Path, default=ROOT / "BENCHMARKS.md",
                    help="the file whose table to rewrite (default: BENCHMARKS.md)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.quick, args.out)
    if args.list:
        for b in BENCHES:
            mode = "full mode only" if b.full_only else "--quick: smaller samples" if b.quick \
                else "the same in both modes"
            print(f"{b.name:<14} {b.command(False):<52} {mode}")
        return 0
    names = [n for group in args.only for n in group.split(",") if n]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        print(f"run.py: unknown benchmark(s) {', '.join(unknown)}; one of "
              f"{', '.join(BY_NAME)}", file=sys.stderr)
        return 2
    try:
        old = parse(split(args.file.read_text(encoding="utf-8"))[1])
    except OSError as exc:
        print(f"run.py: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except MarkerError as exc:
        print(f"run.py: {args.file}: {exc}", file=sys.stderr)
        return 2

    chosen = [b for b in BENCHES if not names or b.name in names]
    where = machine()
    date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    new, ran, failures = [], [], 0
    started = time.monotonic()
    for i, b in enumerate(chosen, 1):
        if args.quick and b.full_only:
            print(f"[{i}/{len(chosen)}] {b.name}: full mode only, its rows kept", file=sys.stderr)
            continue
        load = os.getloadavg()[0]
        print(f"[{i}/{len(chosen)}] {b.name}: {b.command(args.quick)} ...", end="",
              file=sys.stderr, flush=True)
        figs, reason, seconds = run_one(b, args.quick)
        print(f" {seconds:.1f} s" + (f", {FAILED}{reason}" if reason else
                                     f", {len(figs)} figure(s)"), file=sys.stderr)
        failures += bool(reason)
        ran.append(b.path)
        new += rows_of(b, args.quick, figs, reason, load, where, date)
    seen = [r.figure for r in new]
    dupes = sorted({f for f in seen if seen.count(f) > 1})
    if dupes:
        print(f"run.py: figures named twice: {', '.join(dupes)}", file=sys.stderr)
        return 1
    rows = merge(old, new, ran, [b.path for b in BENCHES])
    print(render(rows))
    print(f"\n{len(new)} row(s) from this run, {len(rows) - len(new)} kept; "
          f"{time.monotonic() - started:.0f} s", file=sys.stderr)
    if not args.dry_run:
        try:
            text = rewrite(args.file.read_text(encoding="utf-8"), rows)
        except MarkerError as exc:  # edited while the benchmarks ran
            print(f"run.py: {args.file}: {exc}", file=sys.stderr)
            return 2
        write_atomic(args.file, text)
        print(f"wrote the current figures of {args.file}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
