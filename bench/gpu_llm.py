"""LLM-scale acceptance (issue 41, item 4): a Llama model in bf16 on 8 stages measured alone,
per-rank predicted vs measured, and mCAP's pick against today's splits.

    python bench/gpu_llm.py OUT [--device cuda|cpu] [--budget SECONDS]

``bench/gpu_acceptance.py`` runs it as its ``llm`` step; ``--device cpu`` runs the same
commands CI-sized (a narrow Llama on 4 stages), so the GPU run is not its first. Everything
goes through the CLI into ``OUT/store.sqlite`` (stages run alone, stage keys reused):

1. for GPipe and 1F1B: ``profile`` (mCAP's plan) and ``sweep --sample N``;
2. every ok run of each sweep predicted rank by rank from its schedule's profile (the
   default predictor): p50 / p90 / max of |predicted - measured| / measured, target p90
   <= 2%;
3. under GPipe, the picks of ``exact`` (mCAP), ``titan`` (torchtitan's even split of the
   blocks, embedding and head on the first and last stage) and ``params`` (DeepSpeed's
   ``parameters``), each measured (``measure``): its fullest rank;
4. each pick measured again at twice the batch size: per rank, the line through the two
   measured peaks gives the largest micro-batch whose fullest rank fits an 80 GiB device
   (an H100), reported per split and as a ratio to the baselines'. A line through two
   measured points, not a measurement at that size: said so in the result.

Prints one line per finding and writes ``OUT/llm.json``. Stops a step when its time is up
and says which were skipped.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

H100_BYTES = 80 * 2**30
# (spec, stages, batch, micro-batches, sweep sample, precision)
SIZES = {
    "cuda": ("hf:llama-3.2-1b:num_hidden_layers=8,seq=2048", 8, 8, 8, 12, "bf16-autocast"),
    "cpu": ("hf:llama:hidden_size=64,intermediate_size=172,num_attention_heads=2,"
            "num_key_value_heads=1,num_hidden_layers=6,vocab_size=2048,seq=32",
            4, 4, 4, 4, "bf16-autocast"),
}
SCHEDULES = ("gpipe", "1f1b")
SPLITS = ("exact", "titan", "params")


class OutOfTime(Exception):
    pass


class Cli:
    """``python -m mcap`` into one store, each call within what is left of the budget."""

    def __init__(self, work: Path, device: str, deadline: float, log=None):
        self.work, self.device, self.deadline = work, device, deadline
        self.log = log or (lambda text: print(text, flush=True))
        spec, self.stages, self.batch, self.chunks, self.sample, self.precision = SIZES[device]
        self.spec = spec

    def __call__(self, *argv: str) -> str:
        left = self.deadline - time.monotonic()
        if left < 10:
            raise OutOfTime(argv[0])
        env = {**os.environ, "MCAP_STORE": str(self.work / "store.sqlite")}
        cmd = [sys.executable, "-m", "mcap", *argv]
        started = time.monotonic()
        try:
            done = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                                  timeout=left)
        except subprocess.TimeoutExpired:
            raise OutOfTime(argv[0]) from None
        shown = [f"{a} {b}" for a, b in zip(argv, argv[1:])
                 if a in ("--schedule", "--batch-size", "--balance", "--method")]
        self.log(f"llm: {argv[0]} {' '.join(shown)}: exit {done.returncode} in "
                 f"{time.monotonic() - started:.0f} s")
        if done.returncode:
            raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: "
                               f"{done.stderr.strip()[-1500:]}")
        return done.stdout

    def setup(self, schedule: str, batch: int = None) -> list[str]:
        return ["--model", self.spec, "--stages", str(self.stages), "--batch-size",
                str(batch or self.batch), "--chunks", str(self.chunks), "--schedule", schedule,
                "--precision", self.precision, "--device", self.device]


def per_rank_error(profile_path: Path, sweep_path: Path) -> dict:
    """|predicted - measured| / measured over every rank of the sweep's ok runs, in %."""
    import numpy as np

    from mcap.core.recommend import costs_of
    from mcap.io.jsonio import load_profile, load_sweep
    costs = costs_of(load_profile(profile_path))
    errors = []
    ok = [r for r in load_sweep(sweep_path).runs if r.status == "ok"]
    for run in ok:
        for p, m in zip(costs.peaks(run.balance), run.peaks):
            errors.append(100 * abs(p - m) / m)
    if not errors:
        return {"runs": 0}
    e = np.array(errors)
    return {"runs": len(ok), "ranks": len(errors), "p50": float(np.percentile(e, 50)),
            "p90": float(np.percentile(e, 90)), "max": float(e.max()),
            "predictor": costs.predictor}


def largest_micro_batch(low: list, high: list, micro_low: int, micro_high: int,
                        capacity: int = H100_BYTES) -> int:
    """The largest micro-batch whose fullest rank fits ``capacity``, on each rank's line
    through its peaks measured at two micro-batch sizes (CAPTURE's III-B2 line, inverted:
    ``mcap.core.capture.plan.batch_at_capacity``); 0 when even the first does not fit or no
    rank grows with the micro-batch."""
    from mcap.core.capture.plan import batch_at_capacity
    fits = [batch_at_capacity(a, micro_low, b, micro_high, capacity) for a, b in zip(low, high)]
    fits = [f for f in fits if f is not None]
    return min(fits) if fits else 0


def splits(cli: Cli, profile_path: Path) -> dict:
    """Each split's pick under GPipe measured at the batch size and at twice it."""
    out = {}
    micro = cli.batch // cli.chunks
    for method in SPLITS:
        rec = json.loads(cli("recommend", "--profile", str(profile_path), "--stages",
                             str(cli.stages), "--method", method, "--json"))
        balance = ",".join(map(str, rec["balance"]))
        row = {"balance": rec["balance"], "predicted_peak": rec["predicted_peak"]}
        for key, batch in (("measured", cli.batch), ("measured_2x", 2 * cli.batch)):
            run = json.loads(cli("measure", *cli.setup("gpipe", batch), "--balance", balance,
                                 "--json").strip().splitlines()[-1])
            row[key] = {"status": run["status"], "peaks": run.get("peaks"),
                        "fullest": max(run["peaks"]) if run.get("peaks") else None}
        if row["measured"]["peaks"] and row["measured_2x"]["peaks"]:
            row["largest_micro_batch_80GiB"] = largest_micro_batch(
                row["measured"]["peaks"], row["measured_2x"]["peaks"], micro, 2 * micro)
        out[method] = row
        cli.log(f"llm: {method} {balance}: fullest rank {row['measured']['fullest']:,} bytes; "
                f"largest micro-batch on 80 GiB {row.get('largest_micro_batch_80GiB')}")
    mine = out["exact"].get("largest_micro_batch_80GiB")
    for method in SPLITS[1:]:
        theirs = out[method].get("largest_micro_batch_80GiB")
        if mine and theirs:
            out[method]["mcap_micro_batch_ratio"] = mine / theirs
        a, b = out["exact"]["measured"]["fullest"], out[method]["measured"]["fullest"]
        if a and b:
            out[method]["fullest_ratio_to_mcap"] = b / a
    out["note"] = ("largest micro-batch: each rank's line through its peaks measured at the "
                   "batch size and at twice it, not a run at that size")
    return out


def run(device: str, work: Path, left: float, log=None) -> dict:
    """The whole step (module docstring); partial results when the time runs out."""
    work.mkdir(parents=True, exist_ok=True)
    cli = Cli(work, device, time.monotonic() + left, log)
    log = cli.log
    result: dict = {"model": cli.spec, "stages": cli.stages, "batch_size": cli.batch,
                    "chunks": cli.chunks, "precision": cli.precision,
                    "target_p90_percent": 2.0, "schedules": {}}
    try:
        for schedule in SCHEDULES:
            prof, sweep = work / f"{schedule}.profile.json", work / f"{schedule}.sweep.json"
            if not prof.exists():
                cli("profile", *cli.setup(schedule), "--out", str(prof))
            if not sweep.exists():
                cli("sweep", *cli.setup(schedule), "--sample", str(cli.sample), "--seed", "1",
                    "--out", str(sweep))
            err = per_rank_error(prof, sweep)
            result["schedules"][schedule] = err
            log(f"llm: {schedule}: {err.get('ranks', 0)} ranks, p90 {err.get('p90', float('nan')):.3f}%"
                f" max {err.get('max', float('nan')):.3f}%")
        result["splits"] = splits(cli, work / "gpipe.profile.json")
    except OutOfTime as exc:
        result["skipped"] = f"out of time at {exc}"
        log(f"llm: out of time at {exc}")
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--device", choices=tuple(SIZES), default="cuda")
    ap.add_argument("--budget", type=float, default=600.0, help="seconds (default 600)")
    args = ap.parse_args(argv)
    result = run(args.device, args.out, args.budget)
    (args.out / "llm.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
