"""How much slower a CPU stage computes while other stages compute beside it, measured on
this machine with the model's own layers (issue 25, item 2).

Stages run alone record their own CPU seconds (``mcap.runner.alone.StageTimer``). Run
together, G stage processes share the machine's caches and memory bandwidth, and where
there are fewer cores than stages they take turns on a core, each turn refilling its
caches: the same ops then cost more CPU seconds. On the project's 2-core VM the stages of
VGG11 did a median 1.09x the CPU work together that they did alone
(bench/log/2026-11-26-later-throughput-medians-of-3.md), and the replay
(``mcap.core.stagetime``), which shares the cores fairly but keeps each op's
seconds, was above the measured throughput on 30 of 30 partitionings.

So the slowdown is measured, not fitted (:func:`measure`): k = ``Setup.stages`` fresh
processes, each pinned to the setup's threads, build the model and take one slice of an
even split of its layers (the layers a stage of that partitioning holds). Each times a
micro-batch's forward and backward of its slice, first alone (one process computing, the
others waiting at a barrier), then with n = 2 .. k processes computing at once for the
same wall time. ``factor[n - 1]`` is the median over the n processes of their CPU seconds
per micro-batch together over alone (``factor[0]`` = 1). The replay divides the speed of
each stage computing beside n - 1 others by it (``Link.corun``).

Measured once per machine, model, micro-batch, threads and stage count, and kept for a day
(``mcap.runner.machinecache``); on the CPU only (a GPU stage's times are wall seconds
between synchronisations, and GPU time-slicing is another matter); ``MCAP_CORUN=off``
leaves the replay's fair sharing as it was (``()``). What it leaves out: a stage's work
beside a neighbour of another model slice than the even split's.
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from mcap.core.errors import McapError
from mcap.core.types import Setup
from mcap.runner import machinecache
from mcap.runner.machinecache import finite

ENV = "MCAP_CORUN"
SECTION = "corun"  # of the machine cache
MIN_ITERATIONS = 3  # per process and round
MIN_SECONDS = 0.5  # of CPU per process alone, and of wall per round together
TIMEOUT_S = 600.0
MAX_PROCESSES = 16  # stages beyond it share the factor of 16
_cache: dict = {}


def factors_for(spec: str, setup: Setup, num_layers: int,
                param_bytes: int = 0) -> tuple[float, ...]:
    """This machine's co-run factors for ``spec``'s stages (of its ``num_layers`` and
    ``param_bytes``) under ``setup`` (module docstring): kept in the process, else read from
    the machine cache, else measured. ``()`` on CUDA, with one stage, with
    ``MCAP_CORUN=off``, or when the k processes would not fit in host memory."""
    if setup.device != "cpu" or setup.stages < 2 or num_layers < 2 or not enabled():
        return ()
    k = min(setup.stages, MAX_PROCESSES)
    micro = max(1, setup.batch_size // setup.chunks)
    key = machinecache.machine_key(what="corun", spec=str(spec), micro=micro,
                                   threads=int(setup.threads), processes=k)
    if key not in _cache:
        found = machinecache.read(SECTION, key, _valid)
        if found is None:
            try:
                found = {"factors": list(measure(spec, setup, num_layers, k, param_bytes))}
            except McapError as exc:  # the estimate goes on with fair sharing, said once
                print(f"mcap: {exc}; throughput is estimated without it (fair sharing only)",
                      file=sys.stderr)
                found = {"factors": []}
            else:
                machinecache.write(SECTION, key, found, _valid)
        _cache[key] = tuple(float(x) for x in found["factors"])
    return _cache[key]


def enabled() -> bool:
    """``$MCAP_CORUN``: on (the default, also when empty) or off; McapError naming any
    other value (issue 38: ``MCAP_CORUN=bogus`` was taken as on, silently)."""
    text = os.environ.get(ENV, "").strip().lower()
    if text not in ("", "on", "off"):
        raise McapError(f"{ENV}={os.environ.get(ENV, '')!r:.40} is not on or off (off leaves "
                        "the co-run slowdown out of throughput estimates)")
    return text != "off"


def _valid(value: dict) -> bool:
    xs = value.get("factors")
    return (isinstance(xs, list) and 2 <= len(xs) <= MAX_PROCESSES
            and all(finite(x) and 0.2 <= x <= 5.0 for x in xs))


def even_slices(num_layers: int, k: int) -> list[tuple[int, int]]:
    """[lo, hi) of each of k slices of an even split of ``num_layers`` layers."""
    k = max(1, min(k, num_layers))
    bounds = [round(i * num_layers / k) for i in range(k + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


def measure(spec: str, setup: Setup, num_layers: int, k: int,
            param_bytes: int = 0) -> tuple[float, ...]:
    """Run the k processes (module docstring) and return ``(1.0, c(2), ..., c(k))``. Each
    builds the whole model (its weights) and a slice's gradients, so (k + 1) x the
    parameter bytes must fit in host memory before any starts (``TooLarge`` otherwise)."""
    from mcap.models.limits import check_allocation
    from mcap.models.spec import is_trusted
    from mcap.runner.machine import process_env

    slices = even_slices(num_layers, k)
    k = len(slices)
    if k < 2:
        return ()
    check_allocation(f"measuring how {k} stage processes of {spec!r} slow each other "
                     f"(each builds the model)", (k + 1) * int(param_bytes))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with tempfile.TemporaryDirectory(prefix="mcap-corun-") as tmp:
        task = {"spec": str(spec), "trusted": is_trusted(spec), "slices": slices,
                "micro": max(1, setup.batch_size // setup.chunks),
                "threads": int(setup.threads),
                "slots": max(1, (cores or 1) // max(1, int(setup.threads)))}
        Path(tmp, "task.json").write_text(json.dumps(task))
        what = f"measuring how {k} stage processes of {spec!r} slow each other"
        outs = []
        for out in machinecache.run_processes("mcap.runner.corun",
                                              [(tmp, rank, k) for rank in range(k)],
                                              process_env(int(setup.threads)), TIMEOUT_S, what):
            try:
                outs.append(json.loads(out.strip().splitlines()[-1]))
            except (ValueError, IndexError):
                raise McapError(f"{what} gave no result: {out[-200:]!r}") from None
    return factors(outs)


def factors(outs: list) -> tuple[float, ...]:
    """``(1.0, c(2), ..., c(k))`` from each process's ``{"alone": s, "together": {n: s}}``
    (CPU seconds per micro-batch): c(n) the median over the n processes that computed."""
    k = len(outs)
    out = [1.0]
    for n in range(2, k + 1):
        ratios = [o["together"][str(n)] / o["alone"] for o in outs[:n] if o["alone"] > 0]
        out.append(statistics.median(ratios) if ratios else 1.0)
    return tuple(out)


def _slice_step(task: dict, rank: int):
    """Build the model and return one micro-batch's forward and backward of slice ``rank``."""
    import torch

    from mcap.models import build_model
    from mcap.models.spec import TrustedSpec

    # The parent checked the spec before starting this process (Runner: check_trusted).
    spec = TrustedSpec(task["spec"]) if task["trusted"] else task["spec"]
    built = build_model(spec)
    lo, hi = task["slices"][rank]
    layers = list(built.module)
    inputs, targets = built.example_batch(int(task["micro"]))
    x, y = inputs[: int(task["micro"])], targets[: int(task["micro"])]
    with torch.no_grad():
        for layer in layers[:lo]:
            x = layer(x)
    part = layers[lo:hi]
    params = [p for layer in part for p in layer.parameters()]

    def step() -> None:
        h = _detached(x, lo > 0)
        for layer in part:
            h = layer(h)
        loss = built.loss(h, y) if hi == len(layers) else _float_sum(h)
        loss.backward()
        for p in params:
            p.grad = None

    return step


def _detached(x, grad: bool):
    """A slice's input as a fresh leaf; layers may pass tuples (Hugging Face blocks, AmoebaNet
    cells), whose structure is kept."""
    if isinstance(x, (tuple, list)):
        return tuple(_detached(t, grad) for t in x)
    if not hasattr(x, "detach"):
        return x
    return x.detach().requires_grad_(grad and x.is_floating_point())


def _float_sum(h):
    """A scalar to run backward from a slice's output (a tensor, or a tuple of them)."""
    if isinstance(h, (tuple, list)):
        parts = [_float_sum(t) for t in h]
        parts = [p for p in parts if p is not None]
        return sum(parts[1:], parts[0]) if parts else None
    if hasattr(h, "is_floating_point") and h.is_floating_point() and h.requires_grad:
        return h.float().sum()
    return None


def _serve(folder: str, rank: int, k: int) -> dict:
    """One of the k processes: its slice alone, then in rounds of n = 2 .. k together."""
    from datetime import timedelta

    task = json.loads(Path(folder, "task.json").read_text())
    from mcap.runner.machine import pin_threads
    pin_threads(int(task["threads"]))
    import torch
    import torch.distributed as dist

    step = _slice_step(task, rank)
    step()  # warm up: first-touch pages, oneDNN's kernel choice
    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank,
                            world_size=k, timeout=timedelta(seconds=TIMEOUT_S))
    clock = time.thread_time if int(task["threads"]) == 1 else time.process_time
    alone: list = []
    for r in range(k):
        dist.barrier()
        if r == rank:
            while len(alone) < MIN_ITERATIONS or sum(alone) < MIN_SECONDS:
                c0 = clock()
                step()
                alone.append(clock() - c0)
        dist.barrier()
    # A round together lasts long enough for every process's MIN_ITERATIONS while sharing.
    longest = torch.tensor([max(alone) * MIN_ITERATIONS], dtype=torch.float64)
    dist.all_reduce(longest, op=dist.ReduceOp.MAX)
    together = {}
    for n in range(2, k + 1):
        wall = max(MIN_SECONDS, float(longest) * max(1.0, n / int(task["slots"])))
        dist.barrier()
        if rank < n:
            start, spent = time.perf_counter(), []
            while len(spent) < MIN_ITERATIONS or time.perf_counter() - start < wall:
                c0 = clock()
                step()
                spent.append(clock() - c0)
            together[str(n)] = statistics.median(spent)
        dist.barrier()
    dist.destroy_process_group()
    return {"alone": statistics.median(alone), "together": together}


if __name__ == "__main__":
    folder_arg, rank_arg, k_arg = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    print(json.dumps(_serve(folder_arg, rank_arg, k_arg)))
