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


class _TimingChild:
    """One persistent child process that builds and times models for this process (the
    dashboard server): it imports torch once, answers one JSON request per line, and is
    started again after it dies (a model too large for memory kills the child only)."""

    def __init__(self):
        import threading
        self.proc = None
        self.lock = threading.Lock()

    def _start(self):
        import subprocess
        import sys
        from pathlib import Path
        repo = str(Path(__file__).resolve().parents[2])
        self.proc = subprocess.Popen([sys.executable, "-m", "mcap.runner.timebalance"], cwd=repo,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def ask(self, request: dict, limit_s: float) -> dict:
        import json
        import threading
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            proc = self.proc
            timer = threading.Timer(limit_s, proc.kill)  # a hung timing ends the child
            timer.start()
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (OSError, ValueError):
                line = ""
            finally:
                timer.cancel()
            if not line:
                proc.kill()
                self.proc = None
                return {"error": f"the timing process ended (exit {proc.wait()}) while timing "
                                 f"{request['spec']}: out of memory or killed after {limit_s:.0f} s"}
            try:
                return json.loads(line)
            except ValueError:
                return {"error": f"the timing process answered {line[:200]!r}"}


_CHILD = _TimingChild()


def time_balance_isolated(spec: str, stages: int, micro_batch: int, *,
                          timeout: float = DEFAULT_TIMEOUT, seed: int = 0,
                          limit_s: float = 600.0) -> tuple[int, ...]:
    """``time_balance`` in a child process, for the dashboard server: the model is built
    and timed there, never in the server's own process (a model too large for memory, or
    a crash in torch, takes down the child only; it is started again on the next call).
    The spec must be trusted here already: a user spec from a file is refused before any
    process starts (``UntrustedCode``), and the child runs built-in models only."""
    from mcap.models.spec import check_trusted, is_user_spec

    check_trusted(spec)
    if is_user_spec(str(spec).strip()):
        raise McapError(f"time_balance_isolated runs built-in models only, not {spec!r}; "
                        f"use time_balance in a process that trusts it")
    answer = _CHILD.ask({"spec": str(spec), "stages": int(stages), "micro_batch": int(micro_batch),
                         "timeout": float(timeout), "seed": int(seed)}, limit_s)
    if "balance" in answer:
        return tuple(int(n) for n in answer["balance"])
    raise McapError(f"time: {answer.get('error', 'no answer')}")


def _child_main() -> int:
    """The child: one JSON request per stdin line, one JSON answer per stdout line. The spec
    arrives as a plain str, so a user spec is refused here too (data is data)."""
    import json
    import sys
    for line in sys.stdin:
        try:
            a = json.loads(line)
            balance = time_balance(a["spec"], a["stages"], a["micro_batch"], timeout=a["timeout"],
                                   seed=a["seed"])
            answer = {"balance": list(balance)}
        except McapError as exc:
            answer = {"error": str(exc)}
        except Exception as exc:  # reported to the page as an error, never a traceback
            answer = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
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
    sys.exit(_child_main())
