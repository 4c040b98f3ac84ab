"""Stages sharing one GPU: host copies vs on-device exchange against the compute itself
(issue 13, item 5; target: a paper-scale run costs at most 2x its compute time).

    python bench/bench_gpu_exchange.py [--repeats 3] [--model SPEC --batch-size B
                                        --chunks C --balance B]

Defaults are the paper's setup (VGG11 224x224, 1000 classes, batch 1104 in 12
micro-batches, GPipe, checkpoint except_last) on 4 stages of ``--balance 3,3,5,19`` (the
exact pick in ``../shared/gpu-h100/``). Prints, medians of ``--repeats``:

- compute: the whole model in this process on the same GPU, the same micro-batches one
  after another (forward, backward, optimizer step), the run's 2 iterations; what the
  4 stages on one GPU cannot beat, since they share its SMs;
- the run's window (``Run.seconds``, 2 iterations) with ``MCAP_EXCHANGE=host`` (gloo
  through host memory, the earlier path) and ``ipc`` (``mcap.runner.exchange``), each
  with its ratio to compute and its per-stage peaks.

Needs a CUDA GPU (fewer GPUs than stages, so that stages share one); exits 2 without.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PAPER = "vgg11:image_size=224,classes=1000,hidden=4096"


def compute_seconds(spec: str, batch: int, chunks: int, iterations: int) -> float:
    import torch
    from mcap.models import build_model

    built = build_model(spec, device="cuda")
    model = built.module.cuda()
    inputs, targets = built.example_batch(batch)
    inputs, targets = inputs.cuda(), targets.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iterations):
        opt.zero_grad(set_to_none=True)
        for x, y in zip(inputs.chunk(chunks), targets.chunk(chunks)):
            built.loss(model(x), y).backward()
        opt.step()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    del model, opt, inputs, targets
    torch.cuda.empty_cache()
    return seconds


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=PAPER)
    p.add_argument("--batch-size", type=int, default=1104)
    p.add_argument("--chunks", type=int, default=12)
    p.add_argument("--balance", default="3,3,5,19")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=float, default=600.0)
    args = p.parse_args(argv)

    import torch
    if not torch.cuda.is_available():
        print("bench_gpu_exchange: needs a CUDA GPU", file=sys.stderr)
        return 2
    from mcap.core.types import Setup
    from mcap.runner import ITERATIONS, open_runner

    balance = tuple(int(b) for b in args.balance.split(","))
    setup = Setup(stages=len(balance), batch_size=args.batch_size, chunks=args.chunks,
                  schedule="gpipe", checkpoint="except_last", device="cuda",
                  engine="pipelining")
    if torch.cuda.device_count() >= setup.stages:
        print(f"bench_gpu_exchange: {torch.cuda.device_count()} GPUs for {setup.stages} "
              "stages: no stage shares one (hide GPUs with CUDA_VISIBLE_DEVICES)",
              file=sys.stderr)
        return 2
    print(f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA "
          f"{torch.version.cuda}; {args.model} batch {args.batch_size} in {args.chunks}, "
          f"balance {args.balance}, {ITERATIONS} iterations", flush=True)
    compute = statistics.median(compute_seconds(args.model, args.batch_size, args.chunks,
                                                ITERATIONS) for _ in range(args.repeats))
    print(f"compute (whole model, one process): {compute:.3f} s", flush=True)
    for how in ("host", "ipc"):
        os.environ["MCAP_EXCHANGE"] = how
        with open_runner(args.model, setup, timeout=args.timeout) as runner:
            runs = [runner.measure(balance) for _ in range(args.repeats)]
        bad = [r for r in runs if r.status != "ok"]
        if bad:
            print(f"{how}: {bad[0].status}: {bad[0].error}")
            continue
        seconds = statistics.median(r.seconds for r in runs)
        peaks = ", ".join(f"{p / 2**20:.1f}" for p in runs[-1].peaks)
        print(f"{how:>4}: {seconds:.3f} s = {seconds / compute:.2f}x compute "
              f"(runs {', '.join(f'{r.seconds:.2f}' for r in runs)}); peaks MiB {peaks}",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
