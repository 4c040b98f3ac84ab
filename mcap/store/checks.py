"""Refusing what does not belong in a study, before anything is written.

The bounds are the ones every row is read back with (``mcap.core.fields``, the checks files
pass too): what the store accepts, it can read and export (issue 28)."""
from __future__ import annotations

import math
import numbers

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.fields import MAX_BYTES, MAX_SECONDS
from mcap.store.records import RUN_KINDS, RUN_STATUSES, Study
from mcap.core.types import ModelInfo, Run, StageRun


def is_int(value) -> bool:
    # numbers.Integral admits numpy integers, which the runner may hand over.
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_run(run: Run, study: Study, kind: str) -> None:
    """Refuse a run that does not belong to the study, before anything is written."""
    if kind not in RUN_KINDS:
        raise McapError(f"run kind must be one of {', '.join(RUN_KINDS)}, got {kind!r}")
    if not isinstance(run, Run):
        raise McapError(f"expected a Run, got {type(run).__name__}")
    balance, stages, layers = tuple(run.balance), study.setup.stages, study.model.num_layers
    if not all(is_int(n) and n >= 1 for n in balance):
        raise InvalidPartitioning(f"balance {list(balance)} has a stage with no layers or a "
                                  f"non-integer count")
    if len(balance) != stages:
        raise InvalidPartitioning(f"balance {list(balance)} has {len(balance)} stages but the "
                                  f"study's setup has {stages}")
    if sum(balance) != layers:
        raise InvalidPartitioning(f"balance {list(balance)} sums to {sum(balance)} but the "
                                  f"model {study.model.spec!r} has {layers} layers")
    if run.status not in RUN_STATUSES:
        raise McapError(f"run status must be one of {', '.join(RUN_STATUSES)}, got "
                        f"{run.status!r} (balance {list(balance)})")
    if run.peaks is None:
        if run.status == "ok":
            raise McapError(f"an ok run needs its peaks (balance {list(balance)})")
    elif len(run.peaks) != stages or not all(is_int(p) and 0 <= p <= MAX_BYTES
                                             for p in run.peaks):
        raise McapError(f"run of balance {list(balance)} has peaks {list(run.peaks)}; "
                        f"expected {stages} int byte counts 0 .. {MAX_BYTES:,} (1 PiB)")
    for label, value in (("seconds", run.seconds), ("samples_per_second", run.samples_per_second)):
        if value is None and label == "samples_per_second":
            continue
        if not _seconds_ok(value):
            raise McapError(f"run of balance {list(balance)} has {label}={value!r}; expected "
                            f"a finite number 0 .. {MAX_SECONDS:,}")
    if run.breakdown is not None and len(run.breakdown) != stages:
        raise McapError(f"run of balance {list(balance)} has a breakdown of "
                        f"{len(run.breakdown)} stages; expected {stages}")


def check_stage_run(run: StageRun, study: Study) -> None:
    """Refuse a stage run that does not belong to the study, before anything is written."""
    if not isinstance(run, StageRun):
        raise McapError(f"expected a StageRun, got {type(run).__name__}")
    # Its balance is checked as a run's is; the rest is the stage's own.
    check_run(Run(run.balance, "failed", None, 0.0), study, "measure")
    if not is_int(run.stage) or not 0 <= run.stage < len(run.balance):
        raise McapError(f"stage {run.stage!r} is not a stage of balance {list(run.balance)}")
    if run.status not in RUN_STATUSES:
        raise McapError(f"stage run status must be one of {', '.join(RUN_STATUSES)}, got "
                        f"{run.status!r}")
    if (run.status == "ok" or run.peak is not None) and \
            not (is_int(run.peak) and 0 <= run.peak <= MAX_BYTES):
        raise McapError(f"a stage run's peak must be int bytes 0 .. {MAX_BYTES:,} (1 PiB; an "
                        f"ok one needs it), got {run.peak!r}")
    if not _seconds_ok(run.seconds):
        raise McapError(f"stage run has seconds={run.seconds!r}; expected a finite number "
                        f"0 .. {MAX_SECONDS:,}")


def _seconds_ok(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, numbers.Real) \
        and math.isfinite(value) and 0 <= value <= MAX_SECONDS


def layer_diff(old: ModelInfo, new: ModelInfo) -> str:
    if old.num_layers != new.num_layers:
        return f"the new one has {new.num_layers}"
    for i, (a, b) in enumerate(zip(old.layers, new.layers)):
        if a != b:
            return (f"layer {i} was {a.name}/{a.param_bytes} bytes, now "
                    f"{b.name}/{b.param_bytes} bytes")
    return "same layers"
