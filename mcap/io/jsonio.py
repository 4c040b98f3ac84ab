"""The versioned JSON forms ``mcap.profile/1`` and ``mcap.sweep/1`` (issue 3, Data model).

Shape of a profile (extra keys allowed)::

    {"schema": "mcap.profile/1",
     "model": {"spec": "vgg11:image_size=32", "layers": [{"name": ..., "param_bytes": int}, ...]},
     "setup": {"stages", "batch_size", "chunks", "schedule", "checkpoint", "device",
               "capacity_bytes", "engine", "optimizer", "threads"},
     "machine": {"device", "cpu", "isa", "threads", "torch", "torch_git", "cuda", "gpu",
                 "driver"},                                       (optional)
     "mem_isolated": [int, ...], "mem_added": [null, int, ...],
     "runs": [{"balance", "status", "peaks", "seconds", "samples_per_second", "error",
               "breakdown": [{"weights","gradients","optimizer","other"}, ...] | null,
               "composed": true}]}   # only on composed runs (mcap.core.profiling.cover)
     "variants": [...], "press": {...}   (optional: CAPTURE / MPress statistics,
                                          mcap.core.capture.variantsjson, mcap.core.press.statsjson)

A sweep has the same model/setup/runs/machine under ``"schema": "mcap.sweep/1"``. The
machine (``mcap.core.machine``) is where the runs were measured; files written before it
existed load with ``machine`` None, "machine unknown", and ``setup.threads`` 1. Unknown
top-level keys are kept in ``Profile.extra`` / ``Sweep.extra`` and written back.
A run with ``"composed": true`` was not measured itself: its peaks (or its oom) were
composed from other runs holding the same stages. Files without the key are measured
runs, as before. A run whose stages ran alone (``mcap.runner.alone``, issue 25) carries
``"times"``: per stage ``{"forward": [[s, ...] per iteration], "backward": [...], "step":
[s per iteration], "recv_bytes", "send_bytes"}``, and ``"estimated": true`` when its
``samples_per_second`` was estimated from them (``mcap.core.stagetime``) rather than timed
on a run of the stages together. A sweep that made such estimates names the link they were
made over in its ``"stage_time_link"`` key (``{"how", "latency", "bytes_per_second",
"slots", "corun"}``, ``stagetime.link_to_json``; kept as an unknown key, read by
``stagetime.link_from_json`` as data, checked, None when unreadable).
``save`` is atomic (temp file in the same folder, fsync, rename), so a crash never
leaves half a file. Every problem raises SchemaError naming the file and what was found.
"""
from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path
from typing import Any, Optional, Union

from mcap.core import consistency, fields
from mcap.core.capture import variantsjson
from mcap.core.press import statsjson
from mcap.core.errors import McapError, SchemaError
from mcap.files import owned, paths
from mcap.core.machine import Machine
from mcap.core.types import ModelInfo, Profile, Run, Setup, StageTimes, Sweep

PROFILE_SCHEMA = "mcap.profile/1"
SWEEP_SCHEMA = "mcap.sweep/1"
_PROFILE_KEYS = {"schema", "model", "setup", "mem_isolated", "mem_added", "runs", "machine",
                 "variants", "press"}
_SWEEP_KEYS = {"schema", "model", "setup", "runs", "machine"}
_SETUP_FIELDS = fields.SETUP_FIELDS
_BREAKDOWN_FIELDS = fields.BREAKDOWN_FIELDS
# Bounds on what a file may say (issue 12; mcap.core.fields, which store rows pass too).
MAX_BYTES, MAX_COUNT = fields.MAX_BYTES, fields.MAX_COUNT
MAX_SECONDS, MAX_JSON_DEPTH = fields.MAX_SECONDS, fields.MAX_JSON_DEPTH
# A file larger than this is refused before it is read (issue 28): decoding takes about
# 8x its size in memory. The largest bundled file, a full sweep of 3,654 runs, is 2.6 MB.
MAX_FILE_BYTES = 256 * 2**20


# --- to dict -------------------------------------------------------------------------

def _model_to_dict(model: ModelInfo) -> dict:
    return {"spec": model.spec,
            "layers": [{"name": l.name, "param_bytes": int(l.param_bytes),
                        **({"kind": l.kind} if l.kind else {}),
                        **({"out_bytes": int(l.out_bytes)} if l.out_bytes else {})}
                       for l in model.layers]}


def _setup_to_dict(setup: Setup) -> dict:
    # Fields added after the files' first version are written only where they differ from
    # their default, so a file of a GPipe fp32 run reads as it always did.
    return {**{k: getattr(setup, k) for k in _SETUP_FIELDS},
            **{k: getattr(setup, k) for k in fields.LATER_SETUP_FIELDS
               if getattr(setup, k) != getattr(Setup(stages=1), k)}}


def machine_to_dict(machine: Machine) -> dict:
    return dataclasses.asdict(machine)


def run_to_dict(run: Run) -> dict:
    out = {"balance": [int(b) for b in run.balance],
           "status": run.status,
           "peaks": None if run.peaks is None else [int(p) for p in run.peaks],
           "seconds": float(run.seconds),
           "samples_per_second": None if run.samples_per_second is None else float(run.samples_per_second),
           "error": run.error,
           "breakdown": None if run.breakdown is None else
           [{k: int(getattr(b, k)) for k in _BREAKDOWN_FIELDS} for b in run.breakdown]}
    if run.composed:
        out["composed"] = True
    if run.times is not None:
        out["times"] = [stage_times_to_dict(t) for t in run.times]
    if run.estimated:
        out["estimated"] = True
    return out


def stage_times_to_dict(t: StageTimes) -> dict:
    return {"forward": [[float(x) for x in f] for f in t.forward],
            "backward": [[float(x) for x in b] for b in t.backward],
            "step": [float(x) for x in t.step],
            "recv_bytes": int(t.recv_bytes), "send_bytes": int(t.send_bytes),
            **({"other": [float(x) for x in t.other]} if t.other else {}),
            **({"memory": [memory_event_to_list(e) for e in t.memory]} if t.memory else {})}


memory_event_to_list = fields.memory_event_to_list


def profile_to_dict(profile: Profile) -> dict:
    out = {"schema": PROFILE_SCHEMA,
           "model": _model_to_dict(profile.model),
           "setup": _setup_to_dict(profile.setup),
           "mem_isolated": [int(v) for v in profile.stats.mem_isolated],
           "mem_added": [None if v is None else int(v) for v in profile.stats.mem_added],
           "runs": [run_to_dict(r) for r in profile.runs]}
    if profile.machine is not None:
        out["machine"] = machine_to_dict(profile.machine)
    if profile.variants:
        out["variants"] = variantsjson.variants_to_json(profile.variants, run_to_dict)
    if profile.press is not None:
        out["press"] = statsjson.press_to_json(profile.press)
    for k, v in (profile.extra or {}).items():
        out.setdefault(k, v)
    return out


def sweep_to_dict(sweep: Sweep) -> dict:
    out = {"schema": SWEEP_SCHEMA,
           "model": _model_to_dict(sweep.model),
           "setup": _setup_to_dict(sweep.setup),
           "runs": [run_to_dict(r) for r in sweep.runs]}
    if sweep.machine is not None:
        out["machine"] = machine_to_dict(sweep.machine)
    for k, v in (sweep.extra or {}).items():
        out.setdefault(k, v)
    return out


# --- from dict -----------------------------------------------------------------------
#
# Every value is checked by mcap.core.fields, the checks store rows pass too (issue 28).

_Reader = fields.Reader
_show = fields.show


def _check_schema(d: Any, expected: str, r: _Reader) -> dict:
    if not isinstance(d, dict):
        raise r.fail("top level", f"expected a JSON object with \"schema\": \"{expected}\", found {_show(d)}")
    found = d.get("schema")
    if found != expected:
        raise SchemaError(f"{r.source}: expected schema {expected!r}, found {found!r}")
    return d


def _model(d, r: _Reader) -> ModelInfo:
    return fields.model(r.need(d, "model", "top level"), r)


def _setup(d, r: _Reader) -> Setup:
    return fields.setup(r.need(d, "setup", "top level"), r)


def _machine(d, r: _Reader) -> Optional[Machine]:
    """The optional "machine" object; absent (older files) is None, "machine unknown"."""
    return fields.machine(d.get("machine"), r)


def _runs(d, r: _Reader, num_layers: int, setup: Setup) -> tuple[Run, ...]:
    return fields.run_list(d.get("runs", []), r, num_layers, "runs",
                           virtual=setup.virtual_stages)


def profile_from_dict(d: Any, source: str = "<profile>") -> Profile:
    r = _Reader(source)
    d = _check_schema(d, PROFILE_SCHEMA, r)
    model = _model(d, r)
    n = model.num_layers
    stats = fields.stats(r.need(d, "mem_isolated", "top level"),
                         r.need(d, "mem_added", "top level"), r, n)
    extra = {k: v for k, v in d.items() if k not in _PROFILE_KEYS}
    setup = _setup(d, r)
    runs = _runs(d, r, n, setup)
    consistency.check("profile", model, setup, runs, r)
    return Profile(model=model, setup=setup, stats=stats,
                   runs=runs, extra=extra or None, machine=_machine(d, r),
                   variants=variantsjson.variants_from_json(
                       d.get("variants", []), n, r.fail,
                       lambda items, where: fields.run_list(items, r, n, where, per_device=True)),
                   press=statsjson.press_from_json(d.get("press"), n, r.fail))


def sweep_from_dict(d: Any, source: str = "<sweep>") -> Sweep:
    r = _Reader(source)
    d = _check_schema(d, SWEEP_SCHEMA, r)
    model = _model(d, r)
    extra = {k: v for k, v in d.items() if k not in _SWEEP_KEYS}
    setup = _setup(d, r)
    runs = _runs(d, r, model.num_layers, setup)
    consistency.check("sweep", model, setup, runs, r)
    return Sweep(model=model, setup=setup, runs=runs, extra=extra or None,
                 machine=_machine(d, r))


# --- files ---------------------------------------------------------------------------

def read_json(path: Union[str, Path], limit: Optional[int] = None,
              what: str = "an mcap JSON file") -> Any:
    """The JSON value in the file ``path``: size capped before reading
    (:func:`read_text_capped`), nesting checked before parsing; SchemaError naming the file
    otherwise. Every mcap JSON file is read here."""
    try:  # empty, too long, a NUL: named, before the system sees it (issue 38)
        p = paths.checked(path, "the file")
    except paths.BadPath as exc:
        raise SchemaError(str(exc)) from None
    text = read_text_capped(p, limit, what)
    if not text.strip():
        raise SchemaError(f"{p}: the file is empty, expected JSON")
    if "\x00" in text:
        raise SchemaError(f"{p}: holds NUL characters: a binary or UTF-16 file, expected UTF-8 JSON")
    if fields.too_deep(text):
        raise SchemaError(f"{p}: JSON nested deeper than {MAX_JSON_DEPTH} levels; an mcap "
                          f"file nests 4")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{p}: not valid JSON (truncated?) at line {exc.lineno} column {exc.colno}: {exc.msg}") \
            from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, nesting past the check
        raise SchemaError(f"{p}: not usable JSON: {str(exc).splitlines()[0][:200]}") from None


_read = read_json


def read_text_capped(p: Path, limit: Optional[int] = None, what: str = "an mcap JSON file") -> str:
    """The UTF-8 text of the regular file ``p``, refused (SchemaError naming the cap) when it
    is larger than ``limit`` bytes (default MAX_FILE_BYTES) *before* anything is read, and
    when it is a folder, a FIFO or a device (reading one would block or never end)."""
    limit = MAX_FILE_BYTES if limit is None else limit
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO must not block the open
    except FileNotFoundError:
        raise SchemaError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise SchemaError(f"{p}: is a folder, not a JSON file") from None
    except OSError as exc:
        raise SchemaError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise SchemaError(f"{p}: is a folder, not a JSON file")
        if not stat.S_ISREG(st.st_mode):
            raise SchemaError(f"{p}: is {_file_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise SchemaError(f"{p}: the file is {st.st_size:,} bytes, above the limit of "
                              f"{limit:,} bytes ({limit // 2**20} MiB) for {what}; "
                              f"nothing was read")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb") as fh:
            fd = None
            data = fh.read(limit + 1)  # the file may have grown since the stat
    except OSError as exc:
        raise SchemaError(f"{p}: cannot read it ({exc.strerror or exc})") from None
    finally:
        if fd is not None:
            os.close(fd)
    if len(data) > limit:
        raise SchemaError(f"{p}: the file is larger than the limit of {limit:,} bytes "
                          f"({limit // 2**20} MiB) for {what}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaError(f"{p}: cannot read it (UnicodeDecodeError: {exc})") from None


def _file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def load_profile(path: Union[str, Path]) -> Profile:
    return profile_from_dict(_read(path), str(path))


def load_sweep(path: Union[str, Path]) -> Sweep:
    return sweep_from_dict(_read(path), str(path))


def load_any(path: Union[str, Path]) -> Union[Profile, Sweep]:
    """A profile or a sweep, by its "schema" key."""
    d = _read(path)
    schema = d.get("schema") if isinstance(d, dict) else None
    if schema == PROFILE_SCHEMA:
        return profile_from_dict(d, str(path))
    if schema == SWEEP_SCHEMA:
        return sweep_from_dict(d, str(path))
    raise SchemaError(f"{path}: expected schema {PROFILE_SCHEMA!r} or {SWEEP_SCHEMA!r}, found {schema!r}")


def to_dict(obj: Union[Profile, Sweep]) -> dict:
    if isinstance(obj, Profile):
        return profile_to_dict(obj)
    if isinstance(obj, Sweep):
        return sweep_to_dict(obj)
    raise McapError(f"cannot save a {type(obj).__name__}; expected a Profile or a Sweep")


def dumps(obj: Union[Profile, Sweep]) -> str:
    return json.dumps(to_dict(obj), indent=1) + "\n"


def save(obj: Union[Profile, Sweep], path: Union[str, Path]) -> Path:
    """Write atomically: a temp file next to ``path``, fsync, then rename over it."""
    return write_text_atomic(Path(path), dumps(obj))


def write_text_atomic(p: Path, text: str) -> Path:
    """``text`` to ``p`` atomically (temp file in the same folder, fsync, rename): a crash
    or a full disk never leaves half a file, and an old file stays whole until replaced.
    Never over a link or another user's file (``mcap.files.owned.replace``, issue 38)."""
    p.parent.mkdir(parents=True, exist_ok=True)
    return owned.replace(p, text, "the file")
