"""Setup rules in one place (pure: no torch, no files).

* :func:`check_setup` — a setup no engine can run, refused naming the values. The runner
  adds what only a machine can tell (how many GPUs there are; ``mcap.runner``).
* :func:`mismatch` / :func:`check_compatible` — whether measurements of one dataset can be
  compared with predictions of another: the same model (layers and their parameter bytes)
  under the same setup. The capacity may differ (a sweep under a capacity has oom runs,
  which are skipped); every other field changes the peaks, so comparing across it would be
  meaningless. Every caller (``evaluate``, the dashboard, the store's reuse) asks here.
* :func:`matching` — which of several sweeps a profile brings with it (issue 40, item 1):
  one that :func:`mismatch` accepts, measured on the profile's machine if one was.
"""
from __future__ import annotations

import re
from typing import Optional, Union

from mcap.core.errors import McapError
from mcap.core import schedules
from mcap.core.types import (
    CHECKPOINTS, DEVICES, OPTIMIZERS, PRECISIONS, ModelInfo, Profile, Setup, Sweep,
)

# The Setup fields that change a measured peak (all but the capacity, which only decides
# whether a run is oom).
PEAK_FIELDS = ("stages", "batch_size", "chunks", "schedule", "checkpoint", "device", "engine",
               "optimizer", "threads", "press", "virtual_stages", "precision")
# Fields compared between a profile and a sweep: the sweep may use another stage count
# only if the predictor allows it (it does: nothing in Listing 1.1 depends on G), but the
# evaluation compares partitionings of the sweep's G, so stages is not compared.
COMPARED_FIELDS = tuple(f for f in PEAK_FIELDS if f != "stages")


def check_setup(setup: Setup, engines: Optional[tuple[str, ...]] = None) -> None:
    """Reject a setup no engine can run, naming the values. ``engines``: the registered
    engine names (``mcap.runner.engines``), checked when given."""
    for name, value, allowed in (("schedule", setup.schedule, schedules.names()),
                                 ("optimizer", setup.optimizer, OPTIMIZERS),
                                 ("precision", setup.precision, PRECISIONS),
                                 ("engine", setup.engine, engines or (setup.engine,)),
                                 ("device", setup.device, DEVICES)):
        if value not in allowed:
            raise McapError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    for name in ("stages", "batch_size", "chunks"):
        value = getattr(setup, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise McapError(f"{name.replace('_', ' ')} must be an integer >= 1, got {value!r}")
    split_batch(setup.batch_size, setup.chunks)
    v = setup.virtual_stages
    if isinstance(v, bool) or not isinstance(v, int):
        raise McapError(f"virtual stages must be a whole number, got {v!r}")
    sched = schedules.get(setup.schedule)
    sched.check(setup.stages, v, setup.chunks)  # V for this schedule, and its rules on M
    checkpoint_modes(setup.checkpoint, setup.num_chunks)
    if isinstance(setup.threads, bool) or not isinstance(setup.threads, int) or setup.threads < 1:
        raise McapError(f"threads must be a whole number of at least 1, got {setup.threads!r}")
    if not isinstance(setup.press, str) or not _PRESS_CODE.fullmatch(setup.press):
        raise McapError(f"press must be an MPress plan code (per layer k, r, s or d<stage>, "
                        f"comma-separated) or empty, got {setup.press!r:.60}")
    if setup.capacity_bytes is not None and (isinstance(setup.capacity_bytes, bool)
                                             or not isinstance(setup.capacity_bytes, int)
                                             or setup.capacity_bytes <= 0):
        raise McapError(f"capacity must be a positive number of bytes, got "
                        f"{setup.capacity_bytes!r}")


def checkpoint_modes(checkpoint: str, num_chunks: int) -> tuple[str, ...]:
    """One checkpoint mode per chunk (stage of the schedule): ``checkpoint`` is one mode for
    all, or one per chunk, comma-separated (issue 39, item 5: checkpointing chosen per
    stage). McapError naming the values otherwise."""
    if not isinstance(checkpoint, str):
        raise McapError(f"checkpoint must be a text, got {checkpoint!r:.40}")
    parts = checkpoint.split(",")
    for p in parts:
        if p not in CHECKPOINTS:
            raise McapError(f"checkpoint {p!r:.40} is not one of {', '.join(CHECKPOINTS)}")
    if len(parts) == 1:
        return tuple(parts) * num_chunks
    if len(parts) != num_chunks:
        raise McapError(f"checkpoint gives {len(parts)} modes ({checkpoint}) but the pipeline "
                        f"has {num_chunks} stages: give one mode, or one per stage")
    return tuple(parts)


_PRESS_CODE = re.compile(r"(?:(?:k|r|s|d[0-9]{1,6})(?:,(?:k|r|s|d[0-9]{1,6}))*)?")


def press_code(plan) -> str:
    """The identity of an MPress plan (``mcap.core.press.actions.PressPlan``) as ``Setup.press``:
    its per-layer actions in layer order (the model and balance are the study's and the
    run's own)."""
    return ",".join("d%d" % a.target if a.action == "d2d" else a.action[0]
                    for stage in plan.stages for a in stage)


def split_batch(batch_size: int, chunks: int, where: str = "") -> int:
    """Samples per micro-batch of ``batch_size`` split into ``chunks`` equal micro-batches,
    the runner's rule for every run; McapError naming both otherwise (``where``: whose
    chunks, e.g. " (the profile's chunks)")."""
    if batch_size % chunks:
        raise McapError(f"batch size {batch_size} does not split into {chunks} equal "
                        f"micro-batches{where}")
    return batch_size // chunks


def micro_batch(setup: Setup) -> int:
    """Samples per micro-batch (at least 1)."""
    return max(setup.batch_size // max(setup.chunks, 1), 1)


Dataset = Union[Profile, Sweep]


def _model_mismatch(a: ModelInfo, b: ModelInfo, what: tuple[str, str]) -> Optional[str]:
    if a.num_layers != b.num_layers:
        return (f"the {what[0]}'s model {a.spec!r} has {a.num_layers} layers but the "
                f"{what[1]}'s {b.spec!r} has {b.num_layers}")
    if a.spec != b.spec:
        return f"the {what[0]} is of {a.spec!r} but the {what[1]} of {b.spec!r}"
    for i, (x, y) in enumerate(zip(a.layers, b.layers)):
        if (x.name, x.param_bytes) != (y.name, y.param_bytes):
            return (f"layer {i} is {x.name}/{x.param_bytes} bytes in the {what[0]} but "
                    f"{y.name}/{y.param_bytes} bytes in the {what[1]}")
    return None


def mismatch(profile: Dataset, sweep: Dataset,
             what: tuple[str, str] = ("profile", "sweep")) -> Optional[str]:
    """Why ``profile``'s predictions cannot be compared with ``sweep``'s measurements (another
    model or setup), or None when they can (module docstring)."""
    why = _model_mismatch(profile.model, sweep.model, what)
    if why:
        return why
    diff = [f"{k} {getattr(profile.setup, k)!r} vs {getattr(sweep.setup, k)!r}"
            for k in COMPARED_FIELDS if getattr(profile.setup, k) != getattr(sweep.setup, k)]
    if diff:
        return (f"the {what[0]} and the {what[1]} were measured under different setups "
                f"({what[0]} vs {what[1]}): {'; '.join(diff)}")
    return None


def matching(profile: Dataset, sweeps) -> Optional[int]:
    """The index of the sweep in ``sweeps`` that ``profile``'s predictions are compared with,
    or None when :func:`mismatch` refuses every one: the one measured on the profile's own
    machine (the same fingerprint, ``Machine.key``) first, then the one with the most ok
    runs (a full sweep before a sample), then the first listed."""
    def machine(data) -> Optional[str]:
        m = getattr(data, "machine", None)
        return None if m is None else m.key()

    mine = machine(profile)
    ranked = [(mine is not None and machine(s) == mine,
               sum(1 for r in s.runs if r.status == "ok"), -i)
              for i, s in enumerate(sweeps) if mismatch(profile, s) is None]
    return -max(ranked)[2] if ranked else None


def check_compatible(profile: Dataset, sweep: Dataset) -> None:
    """:func:`mismatch` as an McapError."""
    why = mismatch(profile, sweep)
    if why:
        raise McapError(why)
