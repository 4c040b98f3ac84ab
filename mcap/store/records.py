"""What the store hands back, and how the library's dataclasses become columns.

The store returns the dataclasses of ``mcap.core.types`` (``Run``, ``Profile``, ``Sweep``,
``ModelInfo``, ``Setup``) and, for what only the store knows (ids, timestamps, jobs),
the small frozen dataclasses below. Never a raw row or dict.

Column encodings are plain JSON text: a balance is ``"[3,3,5,19]"`` (compact, so equal
balances are equal strings and the ``(study, balance)`` index finds them), peaks a JSON
list of ints, a breakdown a JSON list of ``{"weights", "gradients", "optimizer",
"other"}`` objects. Bytes stay Python ints; SQLite's INTEGER and JSON ints are 64-bit
exact, so nothing is rounded.

A row is data someone else may have written (a hand edit, another program, a disk error):
every column is checked on read with the checks files pass (``mcap.core.fields``: types,
ranges, lengths, nesting), and a bad value raises ``StoreError`` naming the store, the
table, the row and the column (issue 28), never a decoding traceback.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Optional

from mcap.core import fields
from mcap.core.errors import McapError, StoreError
from mcap.core.machine import Machine
from mcap.core.types import MemoryBreakdown, ModelInfo, Run, Setup, StageRun, StageTimes

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


# The Setup fields every study row holds (schema version 1 wrote them all): a row missing
# one is refused rather than filled in with a default that was never measured.
_ROW_SETUP_FIELDS = ("stages", "batch_size", "chunks", "schedule", "checkpoint", "device",
                     "capacity_bytes", "engine", "optimizer")


def reader(source, table: str, row_id) -> fields.Reader:
    """The checks of one row: errors read ``store PATH: TABLE row ID: COLUMN: ...``."""
    return fields.Reader(f"store {source}: {table} row {row_id}", StoreError)


def setup_from_json(text: str, r: Optional[fields.Reader] = None) -> Setup:
    r = r or fields.Reader("store", StoreError)
    # Keys a newer mcap added are dropped rather than crashing an older reader.
    return fields.setup(fields.loads(text, r, "setup"), r, required=_ROW_SETUP_FIELDS,
                        press=True)


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


def machine_from_json(text: Optional[str], r: Optional[fields.Reader] = None) -> Optional[Machine]:
    if text is None:
        return None
    r = r or fields.Reader("store: machines", StoreError)
    return fields.machine(fields.loads(text, r, "record"), r, "record")


def model_to_json(model: ModelInfo) -> str:
    return dumps([{"name": layer.name, "param_bytes": layer.param_bytes,
                   **({"kind": layer.kind} if layer.kind else {})} for layer in model.layers])


def model_from_json(spec: str, text: str, r: Optional[fields.Reader] = None) -> ModelInfo:
    r = r or fields.Reader("store", StoreError)
    spec = r.str_(spec, "spec")
    if len(spec) > fields.MAX_SPEC_CHARS:
        raise r.fail("spec", f"a spec of {len(spec):,} characters, above the limit of "
                             f"{fields.MAX_SPEC_CHARS:,}: {fields.show(spec)}")
    return ModelInfo(spec=spec,
                     layers=fields.layers(fields.loads(text, r, "layers"), r, "layers"))


def breakdown_to_json(breakdown: Optional[tuple[MemoryBreakdown, ...]]) -> Optional[str]:
    if breakdown is None:
        return None
    return dumps([dataclasses.asdict(b) for b in breakdown])


def breakdown_from_json(text: Optional[str], r: Optional[fields.Reader] = None,
                        stages: Optional[int] = None) -> Optional[tuple[MemoryBreakdown, ...]]:
    if text is None:
        return None
    r = r or fields.Reader("store", StoreError)
    return fields.breakdowns(fields.loads(text, r, "breakdown"), r, "breakdown", stages)


def extra_to_json(extra: Optional[dict]) -> Optional[str]:
    """A profile's or sweep's unknown JSON keys, kept so nothing of the file is lost."""
    if extra is None:
        return None
    try:
        return dumps(extra)
    except (TypeError, ValueError) as exc:
        raise McapError(f"cannot store the extra keys {sorted(extra)}: {exc}") from exc


def extra_from_json(text: Optional[str], r: Optional[fields.Reader] = None) -> Optional[dict]:
    if text is None:
        return None
    r = r or fields.Reader("store", StoreError)
    return r.obj(fields.loads(text, r, "extra"), "extra")


def ints_or_none(text: Optional[str], r: Optional[fields.Reader] = None,
                 where: str = "value") -> Optional[tuple]:
    """A JSON list column of ints back to a tuple (None stays None; null entries stay
    None); every entry an int of at most 1 PiB in size."""
    if text is None:
        return None
    r = r or fields.Reader("store", StoreError)
    return tuple(r.bytes_(v, f"{where}[{i}]", nullable=True, signed=True)
                 for i, v in enumerate(r.lst(fields.loads(text, r, where), where)))


# --- rows <-> dataclasses ---------------------------------------------------------------

STUDY_COLUMNS = "id, key, spec, layers, setup, created"
RUN_COLUMNS = ("id, study_id, job_id, kind, balance, status, peaks, seconds, "
               "samples_per_second, error, breakdown, created, machine, composed, times, "
               "estimated")
JOB_COLUMNS = ("id, kind, argv, total, done, current, status, error, pid, study_id, "
                "created, updated")


# Unix seconds a row may carry (created, updated): 0 .. year 36812, finite.
MAX_TIME = 2.0**40


def when(v, r: fields.Reader, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or \
            not 0 <= v <= MAX_TIME:
        raise r.fail(where, f"expected a time in unix seconds, found {fields.show(v)}")
    return float(v)


def row_id(v, r: fields.Reader, where: str, nullable: bool = False) -> Optional[int]:
    return r.int_(v, where, nullable=nullable, low=0, high=2**63 - 1)


def study_from_row(row, source="") -> Study:
    i, key, spec, layers, setup, created = row
    r = reader(source, "studies", i)
    return Study(i, r.str_(key, "key"), model_from_json(spec, layers, r),
                 setup_from_json(setup, r), when(created, r, "created"))


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
            "send_bytes": int(t.send_bytes), "other": list(t.other),
            "memory": [[str(k), int(i), int(m), int(b), int(p), int(a)]
                       for k, i, m, b, p, a in t.memory]} for t in items]
    return dumps(out[0] if one else out)


def times_from_json(text: Optional[str], r: Optional[fields.Reader] = None,
                    stages: Optional[int] = None):
    """Back from :func:`times_to_json`: a tuple of ``stages`` StageTimes, or (``stages``
    None) one StageTimes for a stage record."""
    if text is None:
        return None
    r = r or fields.Reader("store", StoreError)
    data = fields.loads(text, r, "times")
    if stages is None:
        return fields.stage_times(data, r, "times")
    return fields.times_list(data, r, "times", stages)


def _flag(v, r: fields.Reader, where: str) -> bool:
    if v not in (0, 1) or isinstance(v, float):
        raise r.fail(where, f"expected 0 or 1, found {fields.show(v)}")
    return bool(v)


def run_record_from_row(row, source="", num_layers: Optional[int] = None,
                        per_device: bool = False) -> RunRecord:
    """A ``runs`` row, every column checked; ``num_layers``: the study's, which the balance
    must partition (None: not known here); ``per_device``: a hybrid study's run, whose
    peaks are per device."""
    (i, study_id, job_id, kind, balance, status, peaks, seconds, sps, error, breakdown,
     created, machine, composed, times, estimated) = row
    r = reader(source, "runs", i)
    bal = fields.balance(fields.loads(balance, r, "balance"), r, "balance", num_layers)
    status = fields.status(status, r, "status")
    pk = None if peaks is None else fields.peaks(fields.loads(peaks, r, "peaks"), r, "peaks",
                                                 len(bal), per_device)
    if status == "ok" and pk is None:
        raise r.fail("peaks", "an ok run needs its per-stage peaks")
    if kind not in RUN_KINDS:
        raise r.fail("kind", f"expected one of {', '.join(RUN_KINDS)}, found {fields.show(kind)}")
    run = Run(balance=bal, status=status, peaks=pk, seconds=r.num(seconds, "seconds"),
              samples_per_second=r.num(sps, "samples_per_second", nullable=True),
              error=r.str_(error, "error", nullable=True),
              breakdown=breakdown_from_json(breakdown, r, len(bal)),
              composed=_flag(composed, r, "composed"),
              times=times_from_json(times, r, len(bal)),
              estimated=_flag(estimated, r, "estimated"))
    return RunRecord(row_id(i, r, "id"), row_id(study_id, r, "study_id"),
                     row_id(job_id, r, "job_id", nullable=True), kind,
                     when(created, r, "created"), run, r.str_(machine, "machine", nullable=True))


def stage_run_from_row(row, source="", num_layers: Optional[int] = None) -> StageRun:
    """A ``stage_runs`` row (id, balance, stage, status, peak, seconds, times, error,
    breakdown), every column checked."""
    i, balance, stage, status, peak, seconds, times, error, breakdown = row
    r = reader(source, "stage_runs", i)
    bal = fields.balance(fields.loads(balance, r, "balance"), r, "balance", num_layers)
    stage = r.int_(stage, "stage", low=0, high=len(bal) - 1)
    status = fields.status(status, r, "status")
    peak = r.bytes_(peak, "peak", nullable=status != "ok")
    bd = breakdown_from_json(breakdown, r, 1)
    return StageRun(bal, stage, status, peak, r.num(seconds, "seconds"),
                    times_from_json(times, r), r.str_(error, "error", nullable=True),
                    bd[0] if bd else None)


def job_from_row(row, source="") -> Job:
    i, kind, argv, total, done, current, status, error, pid, study_id, created, updated = row
    r = reader(source, "jobs", i)
    args = tuple(r.str_(a, f"argv[{k}]")
                 for k, a in enumerate(r.lst(fields.loads(argv, r, "argv"), "argv")))
    cur = None if current is None else fields.balance(fields.loads(current, r, "current"), r,
                                                      "current", None)
    if status not in JOB_STATUSES:
        raise r.fail("status", f"expected one of {', '.join(JOB_STATUSES)}, found "
                               f"{fields.show(status)}")
    return Job(row_id(i, r, "id"), r.str_(kind, "kind"), args,
               r.int_(total, "total", low=0, high=2**63 - 1),
               r.int_(done, "done", low=0, high=2**63 - 1), cur, status,
               r.str_(error, "error", nullable=True),
               r.int_(pid, "pid", nullable=True, low=0, high=2**31),
               row_id(study_id, r, "study_id", nullable=True), when(created, r, "created"),
               when(updated, r, "updated"))
