"""The ``time`` baseline: torchgpipe's own throughput-oriented partitioner.

The paper compares mCAP against TorchGPipe's ``balance_by_time`` (4.3): it times each
layer's forward and backward on a sample micro-batch and splits the layers so each stage
gets about the same time. This module calls the real torchgpipe function and wraps its
balance in a ``Recommendation`` whose predicted peaks come from mCAP's predictor, so it
can sit in the same tables as the memory-balanced methods.
"""
from __future__ import annotations

import copy
import time
from typing import Optional

from mcap.core.errors import McapError
from mcap.core.types import Profile, Recommendation

DEFAULT_TIMEOUT = 1.0


def _without_inplace(module):
    """A copy whose in-place ops (VGG's ReLU(inplace=True)) write to new tensors.

    ``balance_by_time`` detaches each layer's input into a leaf that requires grad, and
    autograd refuses an in-place op on such a leaf. Timing is all that is measured here,
    so an out-of-place copy gives the same split without touching the real model."""
    clone = copy.deepcopy(module)
    for sub in clone.modules():
        if getattr(sub, "inplace", False) is True:
            sub.inplace = False
    return clone


def time_balance(spec: str, stages: int, micro_batch: int, *, timeout: float = DEFAULT_TIMEOUT,
                 device: str = "cpu", seed: int = 0) -> tuple[int, ...]:
    """torchgpipe's ``balance_by_time`` for a model spec, on a sample micro-batch."""
    import torch
    from torchgpipe.balance import balance_by_time

    from mcap.models import build_model

    built = build_model(spec, seed=seed)
    if not 1 <= stages <= built.info.num_layers:
        raise McapError(f"time: cannot split {built.info.num_layers} layers into {stages} stages")
    if micro_batch < 1:
        raise McapError(f"time: micro-batch size must be >= 1, got {micro_batch}")
    module = _without_inplace(built.module).to(device)
    inputs, _ = built.example_batch(micro_batch, seed=seed)
    sample = inputs.to(device) if isinstance(inputs, torch.Tensor) else inputs
    with torch.random.fork_rng(devices=[]):
        balance = balance_by_time(stages, module, sample, timeout=timeout,
                                  device=torch.device(device))
    return tuple(int(n) for n in balance)


def time_balance_isolated(spec: str, stages: int, micro_batch: int, *,
                          timeout: float = DEFAULT_TIMEOUT, seed: int = 0,
                          limit_s: float = 600.0) -> tuple[int, ...]:
    """``time_balance`` in a child process, for the dashboard server: the model is built
    and timed there, never in the server's own process (a model too large for memory, or
    a crash in torch, takes down the child only). The spec must be trusted here already:
    a user spec from a file is refused before any process starts (``UntrustedCode``)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    from mcap.models.spec import check_trusted, is_user_spec

    check_trusted(spec)
    if is_user_spec(str(spec).strip()):
        raise McapError(f"time_balance_isolated runs built-in models only, not {spec!r}; "
                        f"use time_balance in a process that trusts it")
    repo = str(Path(__file__).resolve().parents[2])
    argv = [sys.executable, "-m", "mcap.runner.timebalance", json.dumps(
        {"spec": str(spec), "stages": int(stages), "micro_batch": int(micro_batch),
         "timeout": float(timeout), "seed": int(seed)})]
    try:
        done = subprocess.run(argv, cwd=repo, capture_output=True, text=True, timeout=limit_s,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise McapError(f"time: timing {spec} took more than {limit_s:.0f} s") from None
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if lines else {}
    except ValueError:
        answer = {}
    if "balance" in answer:
        return tuple(int(n) for n in answer["balance"])
    why = answer.get("error") or (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    raise McapError(f"time: {why}")


def _child_main(arg: str) -> int:
    import json
    try:
        a = json.loads(arg)
        balance = time_balance(a["spec"], a["stages"], a["micro_batch"], timeout=a["timeout"],
                               seed=a["seed"])
        print(json.dumps({"balance": list(balance)}))
    except McapError as exc:
        print(json.dumps({"error": str(exc)}))
    return 0


def recommend_time(profile: Profile, *, timeout: float = DEFAULT_TIMEOUT,
                   device: Optional[str] = None) -> Recommendation:
    """The ``time`` method for ``recommend --method time``: torchgpipe's split of the
    profiled model and setup, with mCAP's predicted per-stage peaks for comparison."""
    from mcap.core.predict import predict

    setup = profile.setup
    device = device or ("cuda" if setup.device == "cuda" else "cpu")
    micro_batch = max(setup.batch_size // max(setup.chunks, 1), 1)
    started = time.perf_counter()
    balance = time_balance(profile.model.spec, setup.stages, micro_batch,
                           timeout=timeout, device=device)
    seconds = time.perf_counter() - started
    prediction = predict(profile.stats, balance)
    return Recommendation(method="time", balance=balance, predicted_peaks=prediction.peaks,
                          seconds=seconds, evaluated=1)


if __name__ == "__main__":
    import sys
    sys.exit(_child_main(sys.argv[1]))
