"""On paper (issue 42): the wall time of a full profiling plan plus a 1,000-partitioning
sample of an 8B LLM, measured stage by stage alone on 1, 8 and 64 GPUs
(``mcap.core.fanout``: each stage-alone measurement a task, to the first free GPU).

    python bench/bench_fanout.py [--gpus 1,8,64] [--stages 8] [--sample 1000]
                                 [--tflops 400] [--start S] [--markdown]

What each task costs:
- ``start``: a fresh process's start-up, build and run of a tiny stage, **measured here**
  (median of 3 fresh ``python`` processes running ``mcap.runner.fresh.measure``), unless
  ``--start`` gives a GPU node's own figure (a CUDA context adds to it);
- the stage's two training iterations (each the whole batch through the stage, as a
  profiling run trains): per layer 6 x its parameters x the tokens of a batch, plus a
  block's attention (12 x seq x hidden per token), at ``--tflops`` (default 400 TFLOP/s
  of bf16: half an H200's measured 790), embeddings and norms free. The layers and their
  parameters are the model's own (``hf:llama`` at Llama-3-8B's sizes, built on the meta
  device).

The plan is mCAP's profiling plan (``profiling_plan``, each run's stages measured whole),
then the sample's stage keys the plan did not measure (a sweep composes the rest).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LLAMA_8B = ("hf:llama-3.2-1b:hidden_size=4096,intermediate_size=14336,num_hidden_layers=32,"
            "num_key_value_heads=8,head_dim=128,tie_word_embeddings=false")
SEQ, BATCH = 4096, 8  # sequences of 4096 tokens, 8 per batch (a micro-batch each on 8 stages)


def measured_start(repeats: int = 3) -> float:
    """Seconds of a fresh process that imports torch, builds a tiny model and runs one
    stage of it alone (what every task pays before its own layers)."""
    code = ("from mcap.runner import fresh\nfrom mcap.core.types import Setup\n"
            "from mcap.runner.protocol import Job\n"
            "fresh.measure('gpt:layers=1,hidden=32,vocab=64,seq=16', "
            "Setup(stages=2, batch_size=4, chunks=2), Job(1, (1, 2), None, stage=0))\n")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def layer_seconds(spec: str, tflops: float) -> list[float]:
    """Each layer's seconds for one training iteration of the batch (module docstring)."""
    from mcap.models import build_model
    info = build_model(spec, device="meta").info
    hidden = 4096
    tokens = SEQ * BATCH
    out = []
    for layer in info.layers:
        params = layer.param_bytes / 4  # float32 parameters on the meta device
        kind = (layer.kind or layer.name).lower()
        if "embed" in kind or "norm" in kind:
            flops = 0.0
        else:
            flops = 6 * params * tokens
            if "decoder" in kind or "block" in kind:
                flops += 12 * SEQ * hidden * tokens
        out.append(flops / (tflops * 1e12))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="1,8,64")
    ap.add_argument("--stages", type=int, default=8)
    ap.add_argument("--sample", type=int, default=1000)
    ap.add_argument("--tflops", type=float, default=400.0)
    ap.add_argument("--start", type=float, default=None, help="seconds per task before its "
                    "layers (default: measured here)")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    from mcap.core import fanout
    from mcap.core.partition import random_partitionings
    from mcap.core.profiling.schedule import profiling_plan

    start = args.start if args.start is not None else measured_start()
    per_layer = layer_seconds(LLAMA_8B, args.tflops)
    L, G = len(per_layer), args.stages
    plan = profiling_plan(L, G, "mcap").runs
    sample = random_partitionings(L, G, args.sample, seed=0)
    keys = fanout.stage_tasks(plan, sample)
    prefix = [0.0]
    for s in per_layer:
        prefix.append(prefix[-1] + s)
    seconds = fanout.task_seconds(keys, lambda a, z: start + 2 * (prefix[z + 1] - prefix[a]))
    plan_tasks = sum(len(b) for b in plan)
    rows = []
    for w in (int(x) for x in args.gpus.split(",")):
        r = fanout.makespan(seconds, w)
        rows.append((w, r))
    head = (f"{L} layers (Llama-3-8B sizes), {G} stages, batch {BATCH} x {SEQ} tokens; "
            f"{len(plan)} profiling runs ({plan_tasks} stage tasks) + {len(keys) - plan_tasks} "
            f"more stage keys of a {args.sample}-partitioning sample = {len(keys)} tasks; "
            f"start {start:.2f} s per task ({'given' if args.start is not None else 'measured here'}), "
            f"layers at {args.tflops:g} TFLOP/s (a block {2 * per_layer[1]:.3f} s per 2 "
            f"iterations)")
    if args.markdown:
        print(head + "\n")
        print("| GPUs | wall time | lower bound | speed-up |")
        print("|---|---|---|---|")
        for w, r in rows:
            print(f"| {w} | {r.seconds / 60:.1f} min | {r.bound / 60:.1f} min | "
                  f"{r.speedup:.1f}x |")
    else:
        print(head)
        for w, r in rows:
            print(f"{w:>3} GPUs: {r.seconds / 60:7.1f} min (bound {r.bound / 60:.1f} min, "
                  f"{r.speedup:.1f}x)")


if __name__ == "__main__":
    main()
