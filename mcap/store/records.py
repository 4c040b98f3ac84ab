"""What the store hands back, and how the library's dataclasses become columns.

The store returns the dataclasses of ``mcap.core.types`` (``Run``, ``Profile``, ``Sweep``,
``ModelInfo``, ``Setup``) and, for what only the store knows (ids, timestamps, jobs),
the small frozen dataclasses below. Never a raw row or dict.

Column encodings are plain JSON text: a balance is ``"[3,3,5,19]"`` (compact, so equal
balances are equal strings and the ``(study, balance)`` index finds them), peaks a JSON
list of ints, a breakdown a JSON list of ``{"weights", "gradients", "optimizer",
"other"}`` objects. Bytes stay Python ints; SQLite's INTEGER and JSON ints are 64-bit
exact, so nothing is rounded.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Optional

from mcap.core.errors import McapError
from mcap.core.machine import Machine
from mcap.core.types import Layer, MemoryBreakdown, ModelInfo, Run, Setup, StageTimes

RUN_KINDS = ("profile", "sweep", "measure")
RUN_STATUSES = ("ok", "oom", "failed")
# "pending" until the child process starts; the other four are what update_job accepts.
JOB_STATUSES = ("pending", "running", "done", "failed", "cancelled")
FINAL_JOB_STATUSES = ("done", "failed", "cancelled")

# The Setup fields that existed when schema version 1 was written. They always enter the
# study key; a field added to Setup later enters it only when it differs from its
# default, so adding an optional field never orphans the studies already stored.
_KEY_FIELDS_V1 = ("stages", "batch_size", "chunks", "schedule", "checkpoint", "device",
                  "capacity_bytes", "engine", "optimizer")
# Setup.device was called ``backend`` when schema version 1 was written; the key text keeps
# the old word so stored studies are found again.
_KEY_NAMES = {"device": "backend"}


@dataclass(frozen=True)
class Study:
    """One (model spec, setup) pair: the unit whose runs may be combined (profile 32 and
    profile 64 never mix). ``key`` is the stable text that identifies it."""
    id: int
    key: str
    model: ModelInfo
    setup: Setup
    created: float  # unix seconds


@dataclass(frozen=True)
class StudySummary:
    id: int
    spec: str
    setup: Setup
    num_runs: int
    created: float


@dataclass(frozen=True)
class RunRecord:
    """A stored run with what only the store knows: where and when it was recorded."""
    id: int
    study_id: int
    job_id: Optional[int]
    kind: str  # one of RUN_KINDS
    created: float  # unix seconds, when record_run was called
    run: Run
    machine: Optional[str] = None  # Machine.key() of where it was measured; None: unknown


@dataclass(frozen=True)
class Summary:
    """A line of ``list_profiles()`` / ``list_sweeps()``."""
    id: int
    name: Optional[str]
    spec: str
    setup: Setup
    num_runs: int
    created: float
    study_id: int
    machine: Optional[Machine] = None  # where its runs were measured; None: unknown


@dataclass(frozen=True)
class Job:
    """A long command (``python -m mcap profile``) the dashboard launched and polls."""
    id: int
    kind: str
    argv: tuple[str, ...]
    total: int
    done: int
    current: Optional[tuple[int, ...]]  # the balance being measured now
    status: str  # one of JOB_STATUSES
    error: Optional[str]
    pid: Optional[int]
    study_id: Optional[int]
    created: float
    updated: float

    @property
    def finished(self) -> bool:
        return self.status in FINAL_JOB_STATUSES


# --- encodings --------------------------------------------------------------------------

def dumps(value) -> str:
    """Compact, key-sorted JSON: the same value always gives the same text."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def balance_text(balance) -> str:
    return dumps([int(n) for n in balance])


def setup_to_json(setup: Setup) -> str:
    return dumps(dataclasses.asdict(setup))


def setup_from_json(text: str) -> Setup:
    data = json.loads(text)
    if "backend" in data and "device" not in data:  # written before the rename
        data["device"] = data.pop("backend")
    known = {f.name for f in dataclasses.fields(Setup)}
    # Keys a newer mcap added are dropped rather than crashing an older reader.
    return Setup(**{k: v for k, v in data.items() if k in known})


def study_key(spec: str, setup: Setup) -> str:
    """The stable identity of a study: the model spec and every Setup field."""
    fields = {}
    for f in dataclasses.fields(Setup):
        value = getattr(setup, f.name)
        if f.name in _KEY_FIELDS_V1 or value != f.default:
            fields[_KEY_NAMES.get(f.name, f.name)] = value
    return dumps({"spec": spec, "setup": fields})


def machine_to_json(machine: Machine) -> str:
    return dumps(dataclasses.asdict(machine))


def machine_from_json(text: Optional[str]) -> Optional[Machine]:
    if text is None:
        return None
    known = {f.name for f in dataclasses.fields(Machine)}
    return Machine(**{k: v for k, v in json.loads(text).items() if k in known})


def model_to_json(model: ModelInfo) -> str:
    return dumps([{"name": layer.name, "param_bytes": layer.param_bytes,
                   **({"kind": layer.kind} if layer.kind else {})} for layer in model.layers])


def model_from_json(spec: str, text: str) -> ModelInfo:
    return ModelInfo(spec=spec, layers=tuple(Layer(d["name"], int(d["param_bytes"]), str(d.get("kind", "")))
                                             for d in json.loads(text)))


def breakdown_to_json(breakdown: Optional[tuple[MemoryBreakdown, ...]]) -> Optional[str]:
    if breakdown is None:
        return None
    return dumps([dataclasses.asdict(b) for b in breakdown])


def breakdown_from_json(text: Optional[str]) -> Optional[tuple[MemoryBreakdown, ...]]:
    if text is None:
        return None
    return tuple(MemoryBreakdown(**d) for d in json.loads(text))


def extra_to_json(extra: Optional[dict]) -> Optional[str]:
    """A profile's or sweep's unknown JSON keys, kept so nothing of the file is lost."""
    if extra is None:
        return None
    try:
        return dumps(extra)
    except (TypeError, ValueError) as exc:
        raise McapError(f"cannot store the extra keys {sorted(extra)}: {exc}") from exc


def extra_from_json(text: Optional[str]) -> Optional[dict]:
    return None if text is None else json.loads(text)


# A profile's CAPTURE / MPress statistics ride in the extra column under these keys
# (mcap.core.extras has their shape); the JSON is only ever parsed, never evaluated.
_VARIANTS, _PRESS = "__mcap_variants__", "__mcap_press__"


def _plain_run(run: Run) -> dict:
    return {"balance": list(run.balance), "status": run.status,
            "peaks": None if run.peaks is None else list(run.peaks),
            "seconds": float(run.seconds), "samples_per_second": run.samples_per_second,
            "error": run.error}


def _run_from_plain(d: dict) -> Run:
    return Run(balance=tuple(int(b) for b in d["balance"]), status=str(d["status"]),
               peaks=None if d.get("peaks") is None else tuple(int(p) for p in d["peaks"]),
               seconds=float(d.get("seconds", 0.0)),
               samples_per_second=d.get("samples_per_second"), error=d.get("error"))


def profile_extra_to_json(profile) -> Optional[str]:
    """The extra column of a profile: unknown file keys plus its variants and press stats."""
    from mcap.core import extras
    extra = dict(profile.extra or {})
    if profile.variants:
        extra[_VARIANTS] = extras.variants_to_json(profile.variants, _plain_run)
    if profile.press is not None:
        extra[_PRESS] = extras.press_to_json(profile.press)
    return extra_to_json(extra or None)


def profile_extra_from_json(text: Optional[str], num_layers: int):
    """(extra, variants, press) back from the extra column."""
    from mcap.core import extras
    extra = extra_from_json(text) or {}

    def fail(where, msg):
        return McapError(f"store profile: {where}: {msg}")

    def runs(items, where):
        try:
            return tuple(_run_from_plain(x) for x in items)
        except (KeyError, TypeError, ValueError) as exc:
            raise fail(where, f"unreadable run ({exc})") from None

    variants = extras.variants_from_json(extra.pop(_VARIANTS, []), num_layers, fail, runs)
    press = extras.press_from_json(extra.pop(_PRESS, None), num_layers, fail)
    return extra or None, variants, press


def ints_or_none(text: Optional[str]) -> Optional[tuple]:
    """A JSON list column back to a tuple (None stays None; null entries stay None)."""
    if text is None:
        return None
    return tuple(json.loads(text))


# --- rows <-> dataclasses ---------------------------------------------------------------

STUDY_COLUMNS = "id, key, spec, layers, setup, created"
RUN_COLUMNS = ("id, study_id, job_id, kind, balance, status, peaks, seconds, "
               "samples_per_second, error, breakdown, created, machine, composed, times, "
               "estimated")
JOB_COLUMNS = ("id, kind, argv, total, done, current, status, error, pid, study_id, "
                "created, updated")


def study_from_row(row) -> Study:
    i, key, spec, layers, setup, created = row
    return Study(i, key, model_from_json(spec, layers), setup_from_json(setup), created)


def run_values(run: Run) -> tuple:
    """The columns balance .. breakdown of a run, in table order."""
    return (balance_text(run.balance), run.status,
            None if run.peaks is None else dumps([int(p) for p in run.peaks]),
            float(run.seconds),
            None if run.samples_per_second is None else float(run.samples_per_second),
            run.error, breakdown_to_json(run.breakdown))


def times_to_json(times) -> Optional[str]:
    """A tuple of StageTimes (or one) as JSON text; None stays None."""
    if times is None:
        return None
    one = isinstance(times, StageTimes)
    items = [times] if one else list(times)
    out = [{"forward": [list(f) for f in t.forward], "backward": [list(b) for b in t.backward],
            "step": list(t.step), "recv_bytes": int(t.recv_bytes),
            "send_bytes": int(t.send_bytes), "other": list(t.other)} for t in items]
    return dumps(out[0] if one else out)


def times_from_json(text: Optional[str]):
    """Back from :func:`times_to_json` (a tuple, or one StageTimes for a stage record)."""
    if text is None:
        return None

    def one(d):
        return StageTimes(tuple(tuple(float(x) for x in f) for f in d["forward"]),
                          tuple(tuple(float(x) for x in b) for b in d["backward"]),
                          tuple(float(x) for x in d["step"]), int(d.get("recv_bytes", 0)),
                          int(d.get("send_bytes", 0)),
                          tuple(float(x) for x in d.get("other", ())))

    data = json.loads(text)
    return one(data) if isinstance(data, dict) else tuple(one(d) for d in data)


def run_record_from_row(row) -> RunRecord:
    (i, study_id, job_id, kind, balance, status, peaks, seconds, sps, error, breakdown,
     created, machine, composed, times, estimated) = row
    run = Run(balance=ints_or_none(balance), status=status,
              peaks=ints_or_none(peaks), seconds=seconds, samples_per_second=sps,
              error=error, breakdown=breakdown_from_json(breakdown), composed=bool(composed),
              times=times_from_json(times), estimated=bool(estimated))
    return RunRecord(i, study_id, job_id, kind, created, run, machine)


def job_from_row(row) -> Job:
    i, kind, argv, total, done, current, status, error, pid, study_id, created, updated = row
    return Job(i, kind, tuple(json.loads(argv)), total, done,
               ints_or_none(current), status, error, pid, study_id, created, updated)
