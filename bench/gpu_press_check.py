"""MPress end to end on one device kind, with the project's own commands (issue 30).

    python bench/gpu_press_check.py DEVICE MODEL WORKDIR [BATCH]
    python bench/gpu_press_check.py cuda "gpt:layers=8,hidden=1024,heads=16,vocab=8192,seq=256" WORK 16
    python bench/gpu_press_check.py cpu "gpt:layers=4,hidden=64,heads=2,vocab=64,seq=16" WORK 8

The steps of ``../shared/gpu-h200/press_check.py``, each a ``python -m mcap`` command into a
fresh store under WORKDIR (4 stages, BATCH in 4 micro-batches, checkpoint never):

1. ``profile --press`` (the MPress statistics: saved bytes, swap / recompute times, bandwidths);
2. ``recommend --method exact``: the pick and its predicted peaks;
3. ``measure`` of the pick with every layer kept (the keep-all run);
4. ``press --method mpress`` and ``--method milp`` at 85% and 70% of the pick's highest
   predicted peak, each plan then run with ``measure --press``;
5. one d2d plan whatever the planners chose (they pick d2d only where it is the cheapest
   way to fit): the layer with the most movable bytes of the stage predicted highest moved
   into the stage predicted lowest, predicted by the planners' model
   (``mcap.core.press.model``) and run with ``measure --press``: the path the H200 found
   broken (issue 30).

Prints one line per step and writes WORKDIR/press_check.json: the setup, the pick, the
keep-all run, and per plan its capacity, actions, predicted peaks and added seconds per
iteration, the measured peaks, status (an error's text where a run failed), whether every
stage stayed under the capacity, the per-stage error of the prediction, and the measured
added seconds per iteration against the keep-all run (a run trains 2 iterations). A plan
that cannot be made (no plan fits) is recorded with press's message; one run's failure
never stops the others.

Exit status: 0 when every step ran and every plan's run was ok, 1 when a step or a run
failed (all in the JSON), 2 on bad arguments.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
STAGES, CHUNKS = 4, 4
FRACTIONS = (0.85, 0.7)
METHODS = ("mpress", "milp")
ITERATIONS = 2  # a measured run trains 2 iterations (mcap.runner.protocol.ITERATIONS)
USAGE = "usage: python bench/gpu_press_check.py DEVICE MODEL WORKDIR [BATCH]"


def mcap(log: list, *args: str, ok=(0,)) -> tuple[int, str, str]:
    """One ``python -m mcap`` command from the project root: (exit code, stdout, stderr)."""
    start = time.time()
    done = subprocess.run([sys.executable, "-m", "mcap", *args], cwd=ROOT,
                          capture_output=True, text=True)
    took = time.time() - start
    print(f"$ mcap {' '.join(args[:3])} ... -> {done.returncode} in {took:.1f}s", flush=True)
    log.append({"command": ["mcap", *args], "exit": done.returncode, "seconds": round(took, 2)})
    if done.returncode not in ok:
        print(done.stderr[-3000:], flush=True)
    return done.returncode, done.stdout, done.stderr


def last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(USAGE, file=sys.stderr)
        return 2
    device, model, work = argv[0], argv[1], Path(argv[2])
    batch = argv[3] if len(argv) == 4 else "8"
    if device not in ("cpu", "cuda"):
        print(f"DEVICE must be cpu or cuda, got {device!r}\n{USAGE}", file=sys.stderr)
        return 2
    if not batch.isdigit() or int(batch) % CHUNKS or int(batch) == 0:
        print(f"BATCH must be a positive multiple of {CHUNKS} micro-batches, got {batch!r}",
              file=sys.stderr)
        return 2
    work.mkdir(parents=True, exist_ok=True)
    store = work / "press.sqlite"
    if store.exists():
        store.unlink()  # a fresh store: every number below measured by this run
    setup = ["--model", model, "--stages", str(STAGES), "--batch-size", batch, "--chunks",
             str(CHUNKS), "--checkpoint", "never", "--device", device, "--store", str(store)]
    log: list = []
    summary = {"device": device, "model": model, "batch_size": int(batch), "stages": STAGES,
               "chunks": CHUNKS, "checkpoint": "never", "commands": log, "plans": [],
               "failed": []}
    out = work / "press_check.json"
    started = time.time()

    def finish(code: int) -> int:
        summary["seconds"] = round(time.time() - started, 1)
        summary["ok"] = code == 0
        out.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"summary: {out} ({'ok' if code == 0 else 'FAILED: ' + '; '.join(summary['failed'])})",
              flush=True)
        return code

    prof = work / "press.profile.json"
    code, _, err = mcap(log, "profile", *setup, "--press", "--out", str(prof))
    if code != 0:
        summary["failed"].append(f"profile --press: {last_line(err)}")
        return finish(1)
    summary["profile"] = str(prof)
    stats = json.loads(prof.read_text()).get("press", {})
    summary["press_stats"] = {k: stats.get(k) for k in (
        "host_bandwidth", "d2d_bandwidth", "gpus", "cores", "swap_seconds",
        "recompute_seconds", "forward_seconds", "saved_bytes")}
    code, text, err = mcap(log, "recommend", "--profile", str(prof), "--stages", str(STAGES),
                           "--method", "exact", "--json")
    if code != 0:
        summary["failed"].append(f"recommend: {last_line(err)}")
        return finish(1)
    rec = json.loads(text)
    balance = ",".join(map(str, rec["balance"]))
    peaks = rec["predicted_peaks"]
    summary["pick"] = {"balance": rec["balance"], "predicted_peaks": peaks}
    print(f"pick {balance} predicted peaks {peaks}", flush=True)
    code, text, err = mcap(log, "measure", *setup, "--balance", balance, "--json", ok=(0, 1))
    base = json.loads(text) if text.strip() else {"status": "failed", "error": last_line(err)}
    summary["keep_all"] = {k: base.get(k) for k in ("status", "peaks", "seconds", "error")}
    print(f"keep-all measured {base.get('peaks')} in {base.get('seconds')} s", flush=True)
    if base.get("status") != "ok":
        summary["failed"].append(f"keep-all measure: {base.get('error') or last_line(err)}")
    top = max(peaks)
    for frac in FRACTIONS:
        cap = int(top * frac)
        for method in METHODS:
            row = {"fraction": frac, "capacity_bytes": cap, "method": method}
            summary["plans"].append(row)
            plan = work / f"plan-{method}-{int(round(frac * 100))}.json"
            if plan.exists():
                plan.unlink()
            code, text, err = mcap(log, "press", "--profile", str(prof), "--balance", balance,
                                   "--capacity", str(cap), "--method", method, "--json",
                                   "--out", str(plan), ok=(0, 2))
            if code != 0 or not plan.exists():
                row["plan"] = None
                row["refused"] = last_line(err)  # e.g. no plan fits: the smallest capacity
                print(f"cap {cap} ({frac}) {method}: no plan: {row['refused']}", flush=True)
                if code != 2:
                    summary["failed"].append(f"press {method} at {frac}: {last_line(err)}")
                continue
            made = json.loads(text)
            row.update({"counts": made.get("counts"), "plan": made.get("plan"),
                        "predicted_peaks": made.get("predicted_peaks"),
                        "predicted_added_seconds": made.get("predicted_added_seconds")})
            code, text, err = mcap(log, "measure", *setup, "--balance", balance, "--press",
                                   str(plan), "--json", ok=(0, 1))
            got = json.loads(text) if text.strip() else {"status": "failed",
                                                          "error": last_line(err)}
            meas = got.get("peaks")
            row.update({"status": got.get("status"), "measured_peaks": meas,
                        "seconds": got.get("seconds"), "error": got.get("error")})
            if got.get("status") != "ok":
                summary["failed"].append(f"measure --press {method} at {frac}: "
                                         f"{got.get('error') or last_line(err)}")
            pred = row["predicted_peaks"]
            if meas:
                row["fits"] = max(meas) <= cap
                if pred:
                    row["error_pct"] = [round(100 * (p - q) / q, 2) for p, q in zip(pred, meas)]
            if got.get("seconds") is not None and base.get("seconds") is not None:
                row["measured_added_seconds"] = round(
                    (got["seconds"] - base["seconds"]) / ITERATIONS, 4)
            print(f"cap {cap} ({frac}) {method}: {row['counts']} status {row['status']} "
                  f"predicted {pred} measured {meas} fits {row.get('fits')} added predicted "
                  f"{row['predicted_added_seconds']} s, measured {row.get('measured_added_seconds')} "
                  f"s per iteration (keep-all run {base.get('seconds')} s)"
                  + (f" error {row['error']}" if row.get("error") else ""), flush=True)
            if row.get("error_pct"):
                print(f"  per-stage error %: {row['error_pct']}", flush=True)
    forced_d2d(summary, prof, rec["balance"], work, setup, base, log)
    return finish(1 if summary["failed"] else 0)


def forced_d2d(summary: dict, prof: Path, balance: list, work: Path, setup: list, base: dict,
               log: list) -> None:
    """Step 5 (module docstring): a d2d plan made here, predicted and measured."""
    from mcap.core.press import problem, to_plan
    from mcap.core.press.model import keep
    from mcap.core.press.actions import LayerAction
    from mcap.io import jsonio
    from mcap.io.pressfile import save

    p = problem(jsonio.load_profile(prof), tuple(balance))
    high = max(range(p.stages), key=lambda s: p.base[s])
    low = min((s for s in range(p.stages) if s != high), key=lambda s: p.base[s])
    layer = max(p.layers(high), key=p.movable)
    row = {"method": "forced d2d", "layer": layer, "source": high, "target": low}
    summary["plans"].append(row)
    if p.movable(layer) <= 0:
        row["refused"] = f"stage {high} has no movable activations"
        print(f"forced d2d: {row['refused']}", flush=True)
        return
    actions = keep(p)
    actions[layer] = LayerAction(layer, "d2d", low)
    made = to_plan(p, actions, "forced-d2d", None)
    path = save(made, work / "plan-forced-d2d.json")
    row.update({"counts": made.counts(), "predicted_peaks": list(made.predicted_peaks),
                "predicted_added_seconds": made.predicted_added_seconds})
    code, text, err = mcap(log, "measure", *setup, "--balance", ",".join(map(str, balance)),
                           "--press", str(path), "--json", ok=(0, 1))
    got = json.loads(text) if text.strip() else {"status": "failed", "error": last_line(err)}
    meas = got.get("peaks")
    row.update({"status": got.get("status"), "measured_peaks": meas,
                "seconds": got.get("seconds"), "error": got.get("error")})
    if got.get("status") != "ok":
        summary["failed"].append(f"measure --press forced d2d: "
                                 f"{got.get('error') or last_line(err)}")
    if meas:
        row["error_pct"] = [round(100 * (a - b) / b, 2)
                            for a, b in zip(made.predicted_peaks, meas)]
        keep_all = base.get("peaks")
        if keep_all:
            row["moved_bytes"] = {"source": keep_all[high] - meas[high],
                                  "target": meas[low] - keep_all[low]}
    if got.get("seconds") is not None and base.get("seconds") is not None:
        row["measured_added_seconds"] = round((got["seconds"] - base["seconds"]) / ITERATIONS, 4)
    print(f"forced d2d: layer {layer} of stage {high} into stage {low}: status "
          f"{row['status']} predicted {row['predicted_peaks']} measured {meas} "
          f"(keep-all {base.get('peaks')}) added predicted {row['predicted_added_seconds']} s, "
          f"measured {row.get('measured_added_seconds')} s per iteration"
          + (f" error {row['error']}" if row.get("error") else ""), flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
