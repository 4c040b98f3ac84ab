"""The GPU acceptance run (issues 25 and 30): one command, at most 8 minutes on one H100 or
H200, that checks what only a GPU can show and brings its data back.

    python bench/gpu_acceptance.py OUT                  # CUDA, the sizes the issues name
    python bench/gpu_acceptance.py OUT --device cpu     # the same steps, CI-sized, on CPU

Steps, in priority order (each has a share of ``--budget``; a step that would not fit is
recorded as skipped, never cut half-way; one step's failure never stops the next):

1. ``paper``: the paper's setup (VGG11 224x224, batch 1104 in 12, GPipe, ``3,3,5,19``)
   with every stage run alone, then concurrent with ``host`` and with ``ipc`` exchange;
   per-stage peaks side by side, the runs' windows against the same compute in one process
   (issue 25: concurrent peaks within 0.5% of stage-alone, ipc at most 2x compute);
2. ``small``: ``vgg11:image_size=32,hidden=512``, batch 8 in 4, 4 stages: ``profile``, the
   sample ``sweep --no-reuse --sample 150 --seed 5`` (every partitioning whole, in its
   shuffled order, stages side by side on the GPU) and the same sample stage-reusing (each
   distinct stage once): the same stage key's spread across runs (target <= 0.1%), composed
   against direct peaks, the default predictor's error and pick (issue 30), the CPU
   profile ``--for cuda`` against this sweep, and the picks measured;
3. ``hybrid``: one 8-device CAPTURE plan measured rank by rank (each device alone);
4. ``throughput``: a dozen of the sample's partitionings run concurrently (the run whose
   time is real) against the throughput estimated from their stages' own times;
5. ``tests``: ``pytest -m cuda`` over the files holding CUDA tests;
6. ``press``: ``bench/gpu_press_check.py`` (MPress plans measured on the device);
7. ``schedules`` (issue 39): the small VGG11 and GPT-2 setups profiled under GPipe and
   interleaved zero bubble (``bench/bench_schedules.py``), then interleaved-1f1b (V=2) and
   zbv swept on 2 GPUs' worth of ranks, each run alone: every rank predicted from the two
   profiles, per-rank error p90 (target <= 2%) and max;
8. ``llm`` (issue 41, item 4): ``bench/gpu_llm.py``: a Llama-3.2-1B of 8 blocks at sequence
   2048 in bf16 on 8 stages (CPU: a narrow Llama on 4), GPipe and 1F1B profiled and sampled,
   per-rank p90 (target <= 2%), and mCAP's pick against torchtitan's and DeepSpeed's splits
   measured: the fullest rank and the largest micro-batch fitting 80 GiB. Its share of the
   default budget fits a partial run; ``--steps llm --budget 420`` gives it a session's run.

Everything lands in OUT: ``summary.json`` (every figure, each step's command, status and
seconds, the machine, torch, CUDA, commit, date) and the data files with the same
provenance in their ``machine`` key; ``log.txt`` holds what the commands printed.
At most 8 files, so a lent device's ``$OUT`` brings all of them back.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PAPER = {"cuda": ("vgg11:image_size=224,classes=1000,hidden=4096", 1104, 12),
         "cpu": ("vgg11:image_size=32,hidden=64", 8, 4)}
SMALL = {"cuda": ("vgg11:image_size=32,hidden=512", 8, 4, 150),
         "cpu": ("vgg11:image_size=32,hidden=512", 8, 4, 12)}
BALANCE = (3, 3, 5, 19)
SEED = 5
THROUGHPUT_SAMPLE = {"cuda": 12, "cpu": 4}
HYBRID = {"cuda": ("gpt:layers=8,hidden=128,heads=4,vocab=512,seq=64", "2,2:tp2,2:dp2,3,1:tp2", 16, 2),
          "cpu": ("gpt:layers=8,hidden=128,heads=4,vocab=512,seq=64", "2,2:tp2,2:dp2,3,1:tp2", 16, 2)}
PRESS = {"cuda": ("gpt:layers=8,hidden=1024,heads=16,vocab=8192,seq=256", 16),
         "cpu": ("gpt:layers=4,hidden=64,heads=2,vocab=64,seq=16", 8)}
CPU_PROFILE = ROOT / "data" / "vgg11-h512-b8-cpu4.profile.json"
# Seconds each step took on one H200 (2026-11-26): paper 71, small 102, hybrid ~45 (it
# failed then), throughput 12, tests over 290, press 123.
SHARES = {"paper": 0.10, "small": 0.19, "hybrid": 0.05, "throughput": 0.04, "tests": 0.20,
          "press": 0.12, "schedules": 0.16, "llm": 0.14}
# issue 39's setups: (spec, batch, micro-batches); a sample of each sweep
SCHEDULE_MODELS = {"cuda": {"vgg11": ("vgg11:image_size=32,hidden=512", 8, 4),
                            "gpt2": ("hf:gpt2:n_layer=8,n_embd=256,n_head=4,seq=256", 4, 4)},
                   "cpu": {"vgg11": ("vgg11:image_size=32,hidden=64", 8, 4),
                           "gpt2": ("hf:gpt2:n_layer=4,n_embd=64,n_head=2,seq=32", 4, 4)}}
SCHEDULE_SAMPLE = {"cuda": 40, "cpu": 6}


class Log:
    def __init__(self, path: Path):
        self.fh = open(path, "a", encoding="utf-8")

    def __call__(self, text: str) -> None:
        line = f"[{time.strftime('%H:%M:%S')}] {text}"
        print(line, flush=True)
        self.fh.write(line + "\n")
        self.fh.flush()


def run_cmd(log: Log, args: list[str], timeout: float, env: dict | None = None) -> tuple[int, str]:
    """A command of this repo's; its output goes to the log; (exit code, stdout)."""
    log("$ " + " ".join(args))
    try:
        done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True,
                              timeout=max(1.0, timeout), env={**os.environ, **(env or {})})
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        log(out[-4000:])
        log(f"timed out after {timeout:.0f} s")
        return 124, out
    log((done.stdout[-6000:] + done.stderr[-3000:]).rstrip())
    return done.returncode, done.stdout


def mcap(*args: str) -> list[str]:
    return [sys.executable, "-m", "mcap", *args]


def mib(n) -> float | None:
    return None if n is None else round(n / 2**20, 2)


def _peaks(run) -> dict:
    return {"status": run.status, "peaks": list(run.peaks) if run.peaks else None,
            "peaks_mib": [mib(p) for p in run.peaks] if run.peaks else None,
            "seconds": round(run.seconds, 3), "error": run.error,
            "samples_per_second": run.samples_per_second, "estimated": run.estimated}


# --- 1. the paper's setup -------------------------------------------------------------

def step_paper(device: str, out: Path, log: Log, left: float) -> dict:
    from mcap.core.types import Setup
    from mcap.runner import open_runner

    spec, batch, chunks = PAPER[device]
    setup = Setup(stages=4, batch_size=batch, chunks=chunks, device=device)
    result: dict = {"model": spec, "batch_size": batch, "chunks": chunks,
                    "balance": list(BALANCE)}
    modes = [("alone", "stage", None), ("host", "pipeline", "host"),
             ("ipc", "pipeline", "ipc")] if device == "cuda" else \
        [("alone", "stage", None), ("gloo", "pipeline", None), ("store", "pipeline", "store")]
    start = time.monotonic()
    if device == "cuda":  # first: the ratio the exchange is judged by needs it
        sys.path.insert(0, str(ROOT / "bench"))
        from bench_gpu_exchange import compute_seconds
        result["compute_seconds"] = round(compute_seconds(spec, batch, chunks, 2), 3)
    for name, isolation, exchange in modes:
        if time.monotonic() - start > left:
            result[name] = {"status": "skipped: out of time"}
            continue
        saved = os.environ.get("MCAP_EXCHANGE")
        if exchange:
            os.environ["MCAP_EXCHANGE"] = exchange
        try:
            with open_runner(spec, setup, timeout=max(60.0, left), isolation=isolation) as r:
                run = r.measure(BALANCE)
                result[name] = _peaks(run)
                result[name]["window_seconds"] = round(max(
                    (s.seconds for s in r.last_results), default=0.0), 3)
                result[name]["meter"] = r.machine.meter
                if name == "alone":
                    result["machine"] = r.machine.__dict__
        finally:
            if saved is None:
                os.environ.pop("MCAP_EXCHANGE", None)
            else:
                os.environ["MCAP_EXCHANGE"] = saved
        log(f"paper {name}: {result[name]['status']} peaks MiB {result[name].get('peaks_mib')} "
            f"in {result[name].get('seconds')} s (window {result[name].get('window_seconds')} s)")
    alone = result.get("alone", {}).get("peaks")
    for name in ("host", "ipc", "gloo", "store"):
        other = result.get(name, {}).get("peaks")
        if alone and other:
            result[name]["vs_alone_percent"] = [round(100 * (b - a) / a, 3)
                                                for a, b in zip(alone, other)]
        if other and result.get("compute_seconds"):
            result[name]["vs_compute"] = round(result[name]["seconds"] /
                                               result["compute_seconds"], 2)
            result[name]["window_vs_compute"] = round(result[name]["window_seconds"] /
                                                      result["compute_seconds"], 2)
    (out / "paper.json").write_text(json.dumps(result, indent=1))
    return result


# --- 2. the small VGG11: profile, sweeps, predictor -------------------------------------

def step_small(device: str, out: Path, log: Log, left: float, work: Path) -> dict:
    from mcap.core.evaluate import percentile, place
    from mcap.core.recommend import costs_of, recommend
    from mcap.io import jsonio

    spec, batch, chunks, sample = SMALL[device]
    tag = f"vgg11-h512-b{batch}-{device}4"
    store = work / "small.sqlite"
    prof = out / f"{tag}.profile.json"
    reuse = out / f"{tag}-sample{sample}-seed{SEED}.sweep.json"
    direct = out / f"{tag}-sample{sample}-seed{SEED}-direct.sweep.json"
    setup = ["--model", spec, "--stages", "4", "--batch-size", str(batch), "--chunks",
             str(chunks), "--device", device, "--store", str(store)]
    side = {"MCAP_STAGE_SLOTS": "4"}  # stages alone side by side: a peak is its process's
    deadline = time.monotonic() + left
    result: dict = {"model": spec, "batch_size": batch, "chunks": chunks, "sample": sample,
                    "seed": SEED}
    for name, args in (("profile", ["profile", *setup, "--out", str(prof)]),
                       ("direct", ["sweep", *setup, "--no-reuse", "--sample", str(sample),
                                   "--seed", str(SEED), "--out", str(direct)]),
                       # a store of its own: each distinct stage measured once, alone,
                       # every partitioning composed (the direct runs would be reused)
                       ("sweep", ["sweep", *setup[:-1], str(work / "reuse.sqlite"),
                                  "--sample", str(sample), "--seed", str(SEED), "--out",
                                  str(reuse)])):
        t = time.monotonic()
        code, text = run_cmd(log, mcap(*args), deadline - time.monotonic(), side)
        result[f"{name}_seconds"] = round(time.monotonic() - t, 1)
        result[f"{name}_summary"] = (text.strip().splitlines() or [""])[-1]
        if code != 0:
            result["status"] = f"{name} exited {code}"
            if name != "sweep":
                return result
    profile, measured = jsonio.load_profile(prof), jsonio.load_sweep(direct)
    composed = jsonio.load_sweep(reuse) if reuse.exists() else measured
    result["machine"] = measured.machine.__dict__ if measured.machine else None
    # the same stage key across runs measured in a shuffled order, and composed vs direct
    sys.path.insert(0, str(ROOT / "bench"))
    from bench_gpu_truth import spread
    worst, key, repeated = spread(list(measured.runs) + list(profile.runs))
    result["spread_percent"] = round(100 * worst, 4)
    result["spread_keys"] = repeated
    result["spread_worst"] = None if key is None else [list(key[0]), key[1]]
    by = {r.balance: r for r in measured.runs if r.status == "ok"}
    diffs = [abs(a - b) / b for r in composed.runs if r.status == "ok" and r.balance in by
             for a, b in zip(r.peaks, by[r.balance].peaks)]
    result["composed_vs_direct_max_percent"] = round(100 * max(diffs), 4) if diffs else None
    # the default predictor on this fresh data (issue 30)
    costs = costs_of(profile)
    ok = [r for r in measured.runs if r.status == "ok"]
    overall = [abs(max(costs.peaks(r.balance)) - max(r.peaks)) / max(r.peaks) for r in ok]
    stage = [abs(p - m) / m for r in ok for p, m in zip(costs.peaks(r.balance), r.peaks)]
    result["predictor"] = {
        "name": costs.predictor, "runs": len(ok),
        "overall_p50": round(100 * percentile(overall, 50), 3),
        "overall_p90": round(100 * percentile(overall, 90), 3),
        "stage_p90": round(100 * percentile(stage, 90), 3),
        "stage_max": round(100 * max(stage), 3)}
    picks = {"exact": recommend(profile, 4, "exact").balance}
    if CPU_PROFILE.exists() and device == "cuda":
        try:
            from mcap.core import forcuda
            cpu = jsonio.load_profile(CPU_PROFILE)
            translated = forcuda.for_cuda(costs_of(cpu), cpu, forcuda.parse_target("cuda"))
            picks["cpu_for_cuda"] = recommend(translated, 4, "exact").balance
            ok_runs = [r for r in measured.runs if r.status == "ok"]
            errs = [abs(max(translated.peaks(r.balance)) - max(r.peaks)) / max(r.peaks)
                    for r in ok_runs]
            from mcap.core.evaluate import rank_agreement
            result["cpu_for_cuda"] = {"overall_p90": round(100 * percentile(errs, 90), 3)}
            from mcap.core.types import Run
            predicted = [Run(r.balance, "ok", tuple(translated.peaks(r.balance)), 0.0)
                         for r in ok_runs]
            result["cpu_for_cuda"]["spearman"] = round(
                rank_agreement(predicted, ok_runs).spearman, 4)
        except Exception as exc:  # noqa: BLE001 - reported, the step goes on
            result["for_cuda_error"] = f"{type(exc).__name__}: {exc}"
    runs = list(measured.runs)
    for name, balance in picks.items():
        if not any(r.balance == balance for r in runs) and time.monotonic() < deadline:
            code, text = run_cmd(log, mcap("measure", *setup, "--balance",
                                           ",".join(map(str, balance)), "--json"),
                                 deadline - time.monotonic())
            if code in (0, 1):
                from mcap.core.types import Run
                got = json.loads(text.strip().splitlines()[-1])
                runs.append(Run(tuple(got["balance"]), got["status"],
                                tuple(got["peaks"]) if got["peaks"] else None, got["seconds"]))
        where = place(name, balance, max(costs.peaks(balance)), runs)
        result[f"pick_{name}"] = {"balance": list(balance), "rank": where.rank,
                                  "of": len([r for r in runs if r.status == "ok"]),
                                  "ratio": where.ratio, "note": where.note}
    log(f"small: spread {result['spread_percent']}% over {repeated} keys; predictor "
        f"{result['predictor']}; picks {[result[k] for k in result if k.startswith('pick_')]}")
    return result


# --- 3. the CUDA tests ----------------------------------------------------------------

def cuda_test_files() -> list[str]:
    """The test files holding CUDA tests (collected alone: a lent device has no streamlit
    or playwright for the dashboard's tests)."""
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if "pytest.mark.cuda" in p.read_text() or "NEEDS_CUDA" in p.read_text())


def step_tests(device: str, out: Path, log: Log, left: float) -> dict:
    code, text = run_cmd(log, [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-p",
                               "no:cacheprovider", "--durations=8", *cuda_test_files()], left)
    (out / "cuda-tests.txt").write_text(text[-200000:])
    last = (text.strip().splitlines() or [""])[-1]
    return {"exit": code, "summary": last}


# --- 4. throughput: estimate vs concurrent -----------------------------------------------

def step_throughput(device: str, out: Path, log: Log, left: float, small: dict) -> dict:
    from mcap.core.evaluate import percentile
    from mcap.core.types import Setup
    from mcap.io import jsonio
    from mcap.runner import open_runner

    spec, batch, chunks, sample = SMALL[device]
    direct = out / f"vgg11-h512-b{batch}-{device}4-sample{sample}-seed{SEED}-direct.sweep.json"
    if not direct.exists():
        return {"status": "skipped: no stage-alone sweep to estimate from"}
    runs = [r for r in jsonio.load_sweep(direct).runs
            if r.status == "ok" and r.samples_per_second and r.estimated]
    runs = runs[:THROUGHPUT_SAMPLE[device]]
    setup = Setup(stages=4, batch_size=batch, chunks=chunks, device=device)
    rows, start = [], time.monotonic()
    with open_runner(spec, setup, timeout=max(60.0, left), isolation="pipeline") as r:
        for alone in runs:
            if time.monotonic() - start > left:
                break
            together = r.measure(alone.balance)
            if together.status == "ok" and together.samples_per_second:
                rows.append({"balance": list(alone.balance),
                             "estimated": round(alone.samples_per_second, 2),
                             "measured": round(together.samples_per_second, 2),
                             "peaks_equal": together.peaks == alone.peaks,
                             "peaks_max_diff_percent": round(max(
                                 abs(a - b) / a for a, b in zip(alone.peaks,
                                                               together.peaks)) * 100, 4)})
    errors = [abs(x["estimated"] - x["measured"]) / x["measured"] for x in rows]
    result = {"runs": rows, "n": len(rows)}
    if errors:
        result.update(p50=round(100 * percentile(errors, 50), 2),
                      p90=round(100 * percentile(errors, 90), 2))
    log(f"throughput: estimate vs concurrent over {len(rows)} runs: p50 {result.get('p50')}% "
        f"p90 {result.get('p90')}%")
    return result


# --- 5. a hybrid plan rank by rank --------------------------------------------------------

def step_hybrid(device: str, out: Path, log: Log, left: float, work: Path) -> dict:
    spec, plan, batch, chunks = HYBRID[device]
    code, text = run_cmd(log, mcap("measure", "--model", spec, "--plan", plan, "--engine",
                                   "hybrid", "--device", device, "--batch-size", str(batch),
                                   "--chunks", str(chunks), "--store",
                                   str(work / "hybrid.sqlite"), "--json"), left)
    result: dict = {"model": spec, "plan": plan, "exit": code}
    try:
        result["run"] = json.loads(text.strip().splitlines()[-1])
    except (ValueError, IndexError):
        pass
    return result


# --- 7. the schedules (issue 39) ------------------------------------------------------------

def step_schedules(device: str, out: Path, log: Log, left: float, work: Path) -> dict:
    """interleaved-1f1b (V=2) and zbv predicted per rank from a GPipe and a zero-bubble
    profile (bench/bench_schedules.py), on the device; the profiles and sweeps come back."""
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_schedules as bs
    folder = work / "schedules"
    folder.mkdir(exist_ok=True)
    deadline = time.monotonic() + left
    result: dict = {}
    for name in SCHEDULE_MODELS[device]:
        remaining = deadline - time.monotonic()
        if remaining < 20:
            result[name] = {"status": "skipped: out of time"}
            continue
        log(f"schedules: {name} ({remaining:.0f} s left)")
        files = bs.measure(folder, name, "fp32", SCHEDULE_SAMPLE[device], 0,
                           models=SCHEDULE_MODELS[device], device=device,
                           schedules=("interleaved-1f1b", "zbv"), timeout=remaining)
        rows = bs.evaluate(files)
        result[name] = {r["schedule"]: {k: r[k] for k in ("partitionings", "ranks", "p50", "p90",
                                                           "max", "exact")} for r in rows}
        log(f"schedules {name}: " + "; ".join(f"{r['schedule']} p90 {r['p90']:.3f}% max "
                                             f"{r['max']:.3f}%" for r in rows))
    result["target_p90_percent"] = 2.0
    return result


# --- 8. LLM scale (issue 41, item 4) ----------------------------------------------------------

def step_llm(device: str, out: Path, log: Log, left: float, work: Path) -> dict:
    """bench/gpu_llm.py on the device (its docstring); the GPipe profile comes back."""
    sys.path.insert(0, str(ROOT / "bench"))
    import gpu_llm
    folder = work / "llm"
    result = gpu_llm.run(device, folder, left, log)
    prof = folder / "gpipe.profile.json"
    if prof.exists() and len(list(out.iterdir())) < 7:  # at most 8 files come back
        shutil.copy(prof, out / "llm-gpipe.profile.json")
        result["file"] = "llm-gpipe.profile.json"
    return result


# --- 6. MPress on the device ----------------------------------------------------------------

def step_press(device: str, out: Path, log: Log, left: float, work: Path) -> dict:
    spec, batch = PRESS[device]
    folder = work / "press"
    code, _ = run_cmd(log, [sys.executable, str(ROOT / "bench" / "gpu_press_check.py"), device,
                            spec, str(folder), str(batch)], left)
    found = folder / "press_check.json"
    result: dict = {"exit": code, "model": spec}
    if found.exists():
        shutil.copy(found, out / "press_check.json")
        result["file"] = "press_check.json"
    return result


def provenance(device: str, argv: list[str]) -> dict:
    import torch

    from mcap.core.types import Setup
    from mcap.runner.machine import collect
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or None
    return {"command": "python bench/gpu_acceptance.py " + " ".join(argv),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            # A lent device gets a copy of the working tree whose git metadata may be an
            # older commit's: the code's own hash says which code ran (code_hash()).
            "commit": commit, "code_sha256": code_hash(),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "machine": collect(Setup(stages=1, device=device)).__dict__}


def code_hash() -> str:
    """sha256 over mcap/ and bench/ Python sources (path and bytes, sorted): the same here
    and on a device for the same code, whatever git metadata came along."""
    import hashlib
    h = hashlib.sha256()
    for p in sorted(list((ROOT / "mcap").rglob("*.py")) + list((ROOT / "bench").glob("*.py"))):
        h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:16]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="folder for summary.json, the data files and the log")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--budget", type=float, default=470.0,
                    help="seconds for all steps (default 470: 8 minutes with start-up)")
    ap.add_argument("--steps", default=",".join(SHARES),
                    help=f"comma-separated, in this order: {','.join(SHARES)}")
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    bad = [s for s in steps if s not in SHARES]
    if bad or args.budget <= 0:
        ap.error(f"unknown steps {bad}; choose from {','.join(SHARES)}" if bad
                 else f"--budget must be positive, got {args.budget}")
    if args.device == "cuda":
        import torch
        if not torch.cuda.is_available():
            print("gpu_acceptance: no CUDA device here; use --device cpu", file=sys.stderr)
            return 2
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="mcap-acceptance-"))
    os.environ["MCAP_STORE"] = str(work / "store.sqlite")
    log = Log(out / "log.txt")
    summary: dict = {"provenance": provenance(args.device, argv or sys.argv[1:]), "steps": {}}
    started = time.monotonic()
    small: dict = {}
    total_share = sum(SHARES[s] for s in steps)
    for i, name in enumerate(steps):
        left_all = args.budget - (time.monotonic() - started)
        share = SHARES[name] / sum(SHARES[s] for s in steps[i:])
        left = max(0.0, left_all * share) if i < len(steps) - 1 else max(0.0, left_all)
        if left < 10:
            summary["steps"][name] = {"status": "skipped: out of time"}
            log(f"{name}: skipped (out of time)")
            continue
        log(f"--- {name} ({left:.0f} s of {left_all:.0f} s left) ---")
        t = time.monotonic()
        try:
            if name == "paper":
                got = step_paper(args.device, out, log, left)
            elif name == "small":
                got = small = step_small(args.device, out, log, left, work)
            elif name == "tests":
                got = step_tests(args.device, out, log, left)
            elif name == "throughput":
                got = step_throughput(args.device, out, log, left, small)
            elif name == "hybrid":
                got = step_hybrid(args.device, out, log, left, work)
            elif name == "schedules":
                got = step_schedules(args.device, out, log, left, work)
            elif name == "llm":
                got = step_llm(args.device, out, log, left, work)
            else:
                got = step_press(args.device, out, log, left, work)
            got.setdefault("status", "done")
        except Exception as exc:  # noqa: BLE001 - one step's failure never stops the next
            log(traceback.format_exc())
            got = {"status": f"failed: {type(exc).__name__}: {exc}"}
        got["seconds"] = round(time.monotonic() - t, 1)
        summary["steps"][name] = got
        (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    summary["seconds"] = round(time.monotonic() - started, 1)
    summary["share_of_budget"] = round(total_share, 2)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
    shutil.rmtree(work, ignore_errors=True)
    log(f"done in {summary['seconds']} s: " + ", ".join(
        f"{k} {v.get('status')}" for k, v in summary["steps"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
