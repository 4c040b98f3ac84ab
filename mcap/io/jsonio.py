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
               "composed": true}]}   # only on composed runs (mcap.core.cover)
     "variants": [...], "press": {...}   (optional: CAPTURE / MPress statistics,
                                          mcap.core.extras has their shape)

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
on a run of the stages together.
``save`` is atomic (temp file in the same folder, fsync, rename), so a crash never
leaves half a file. Every problem raises SchemaError naming the file and what was found.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

from mcap.core import extras
from mcap.core.errors import McapError, SchemaError
from mcap.core.machine import Machine
from mcap.core.types import (Layer, LayerStats, MemoryBreakdown, ModelInfo, Profile, Run, Setup,
                        StageTimes, Sweep)

PROFILE_SCHEMA = "mcap.profile/1"
SWEEP_SCHEMA = "mcap.sweep/1"
_PROFILE_KEYS = {"schema", "model", "setup", "mem_isolated", "mem_added", "runs", "machine",
                 "variants", "press"}
_SWEEP_KEYS = {"schema", "model", "setup", "runs", "machine"}
_SETUP_FIELDS = ("stages", "batch_size", "chunks", "schedule", "checkpoint", "device",
                 "capacity_bytes", "engine", "optimizer", "threads")
_BREAKDOWN_FIELDS = ("weights", "gradients", "optimizer", "other")
# Bounds on what a file may say (issue 12): byte counts a machine can have (1 PiB per
# device), counts a run can have, so no number from a file overflows or poisons a sum.
MAX_BYTES = 2**50
MAX_COUNT = 2**31
MAX_SECONDS = 10**9
MAX_JSON_DEPTH = 64


# --- to dict -------------------------------------------------------------------------

def _model_to_dict(model: ModelInfo) -> dict:
    return {"spec": model.spec,
            "layers": [{"name": l.name, "param_bytes": int(l.param_bytes),
                        **({"kind": l.kind} if l.kind else {})} for l in model.layers]}


def _setup_to_dict(setup: Setup) -> dict:
    return {k: getattr(setup, k) for k in _SETUP_FIELDS}


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
            **({"other": [float(x) for x in t.other]} if t.other else {})}


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
        out["variants"] = extras.variants_to_json(profile.variants, run_to_dict)
    if profile.press is not None:
        out["press"] = extras.press_to_json(profile.press)
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

class _Reader:
    """Checks one document's fields; errors name the source and the path of the field."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, where: str, msg: str) -> SchemaError:
        return SchemaError(f"{self.source}: {where}: {msg}")

    def obj(self, v, where) -> dict:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, found {_show(v)}")
        return v

    def lst(self, v, where) -> list:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list, found {_show(v)}")
        return v

    def int_(self, v, where, nullable=False, low: Optional[int] = None,
             high: Optional[int] = None) -> Optional[int]:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(where, f"expected an integer, found {_show(v)}")
        if (low is not None and v < low) or (high is not None and v > high):
            lo = "" if low is None else f"{low:,}"
            hi = "" if high is None else f"{high:,}"
            raise self.fail(where, f"{_show(v)} is out of range [{lo}, {hi}]")
        return v

    def bytes_(self, v, where, nullable=False, signed=False) -> Optional[int]:
        """A byte count: 0..1 PiB (``signed``: -1 PiB..1 PiB, e.g. mem_added)."""
        return self.int_(v, where, nullable, -MAX_BYTES if signed else 0, MAX_BYTES)

    def num(self, v, where, nullable=False) -> Optional[float]:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and math.isnan(v)):
            raise self.fail(where, f"expected a number, found {_show(v)}")
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not 0 <= f <= MAX_SECONDS:
            raise self.fail(where, f"expected a finite number between 0 and {MAX_SECONDS:,}, found {_show(v)}")
        return f

    def str_(self, v, where, nullable=False) -> Optional[str]:
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, found {_show(v)}")
        return v

    def need(self, d: dict, key: str, where: str):
        if key not in d:
            raise self.fail(where, f"missing key {key!r}")
        return d[key]


def _show(v: Any) -> str:
    try:
        text = json.dumps(v) if not isinstance(v, float) or not math.isnan(v) else "NaN"
    except (ValueError, RecursionError):  # ints beyond str conversion, deep nesting
        text = f"<{type(v).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _check_schema(d: Any, expected: str, r: _Reader) -> dict:
    if not isinstance(d, dict):
        raise r.fail("top level", f"expected a JSON object with \"schema\": \"{expected}\", found {_show(d)}")
    found = d.get("schema")
    if found != expected:
        raise SchemaError(f"{r.source}: expected schema {expected!r}, found {found!r}")
    return d


def _model(d, r: _Reader) -> ModelInfo:
    m = r.obj(r.need(d, "model", "top level"), "model")
    spec = r.str_(r.need(m, "spec", "model"), "model.spec")
    layers = []
    for i, l in enumerate(r.lst(r.need(m, "layers", "model"), "model.layers")):
        l = r.obj(l, f"model.layers[{i}]")
        layers.append(Layer(name=r.str_(r.need(l, "name", f"model.layers[{i}]"), f"model.layers[{i}].name"),
                            param_bytes=r.bytes_(r.need(l, "param_bytes", f"model.layers[{i}]"),
                                                 f"model.layers[{i}].param_bytes"),
                            kind=r.str_(l.get("kind", ""), f"model.layers[{i}].kind")))
    if not layers:
        raise r.fail("model.layers", "the model has no layers")
    return ModelInfo(spec=spec, layers=tuple(layers))


def _setup(d, r: _Reader) -> Setup:
    s = r.obj(r.need(d, "setup", "top level"), "setup")
    kw = {"stages": r.int_(r.need(s, "stages", "setup"), "setup.stages", low=1, high=MAX_COUNT)}
    for k in ("batch_size", "chunks", "threads"):
        if k in s:
            kw[k] = r.int_(s[k], f"setup.{k}", low=1, high=MAX_COUNT)
    for k in ("schedule", "checkpoint", "device", "engine", "optimizer"):
        if k in s:
            kw[k] = r.str_(s[k], f"setup.{k}")
    if "device" not in s and "backend" in s:  # files written before device was renamed
        kw["device"] = r.str_(s["backend"], "setup.backend")
    if "capacity_bytes" in s:
        kw["capacity_bytes"] = r.int_(s["capacity_bytes"], "setup.capacity_bytes", nullable=True,
                                      low=1, high=MAX_BYTES)
    return Setup(**kw)


def _machine(d, r: _Reader) -> Optional[Machine]:
    """The optional "machine" object; absent (older files) is None, "machine unknown"."""
    if d.get("machine") is None:
        return None
    m = r.obj(d["machine"], "machine")
    kw = {}
    for f in dataclasses.fields(Machine):
        where = f"machine.{f.name}"
        required = f.default is dataclasses.MISSING
        if f.name not in m:
            if required:
                raise r.fail("machine", f"missing key {f.name!r}")
            continue
        kw[f.name] = r.int_(m[f.name], where) if f.name == "threads" else \
            r.str_(m[f.name], where, nullable=not required)
    return Machine(**kw)


def _runs(d, r: _Reader, num_layers: int) -> tuple[Run, ...]:
    return _run_list(d.get("runs", []), r, num_layers, "runs")


def _run_list(items, r: _Reader, num_layers: int, where: str,
              per_device: bool = False) -> tuple[Run, ...]:
    """Runs from a list. ``per_device``: a hybrid run (dp/tp stages) has one peak per device,
    at least one per stage."""
    out = []
    for i, x in enumerate(r.lst(items, where)):
        w = f"{where}[{i}]"
        x = r.obj(x, w)
        bal = tuple(r.int_(b, f"{w}.balance", low=1, high=MAX_COUNT) for b in r.lst(r.need(x, "balance", w), f"{w}.balance"))
        if not bal or any(b <= 0 for b in bal) or sum(bal) != num_layers:
            raise r.fail(f"{w}.balance", f"balance {list(bal)} is not a partitioning of {num_layers} layers")
        status = r.need(x, "status", w)
        if status not in ("ok", "oom", "failed"):
            raise r.fail(f"{w}.status", f"expected \"ok\", \"oom\" or \"failed\", found {_show(status)}")
        peaks = x.get("peaks")
        if peaks is not None:
            peaks = tuple(r.bytes_(p, f"{w}.peaks") for p in r.lst(peaks, f"{w}.peaks"))
            if len(peaks) != len(bal) and not (per_device and len(peaks) > len(bal)):
                raise r.fail(f"{w}.peaks", f"{len(peaks)} peaks for {len(bal)} stages")
        if status == "ok" and peaks is None:
            raise r.fail(f"{w}.peaks", "an ok run needs its per-stage peaks")
        breakdown = x.get("breakdown")
        if breakdown is not None:
            items = []
            for j, b in enumerate(r.lst(breakdown, f"{w}.breakdown")):
                b = r.obj(b, f"{w}.breakdown[{j}]")
                items.append(MemoryBreakdown(**{k: r.bytes_(r.need(b, k, f"{w}.breakdown[{j}]"),
                                                            f"{w}.breakdown[{j}].{k}", signed=True)
                                                for k in _BREAKDOWN_FIELDS}))
            breakdown = tuple(items)
        times = x.get("times")
        if times is not None:
            times = tuple(_stage_times(t, r, f"{w}.times[{j}]")
                          for j, t in enumerate(r.lst(times, f"{w}.times")))
            if len(times) != len(bal):
                raise r.fail(f"{w}.times", f"{len(times)} stages' times for {len(bal)} stages")
        out.append(Run(balance=bal, status=status, peaks=peaks,
                       seconds=r.num(x.get("seconds", 0.0), f"{w}.seconds"),
                       samples_per_second=r.num(x.get("samples_per_second"), f"{w}.samples_per_second",
                                                nullable=True),
                       error=r.str_(x.get("error"), f"{w}.error", nullable=True),
                       breakdown=breakdown, composed=_flag(x.get("composed", False), r,
                                                           f"{w}.composed"),
                       times=times,
                       estimated=_flag(x.get("estimated", False), r, f"{w}.estimated")))
    return tuple(out)


def _stage_times(t, r: _Reader, w: str) -> StageTimes:
    """One stage's times (``StageTimes``): lists of seconds per iteration and micro-batch
    (each 0 .. MAX_SECONDS), at most MAX_COUNT of anything."""
    t = r.obj(t, w)

    def seconds(items, where):
        return tuple(r.num(v, f"{where}[{k}]") for k, v in enumerate(r.lst(items, where)))

    def rows(key):
        return tuple(seconds(row, f"{w}.{key}[{i}]")
                     for i, row in enumerate(r.lst(r.need(t, key, w), f"{w}.{key}")))

    forward, backward = rows("forward"), rows("backward")
    if len(forward) != len(backward):
        raise r.fail(w, f"{len(forward)} iterations of forwards but {len(backward)} of "
                        "backwards")
    return StageTimes(forward, backward, seconds(r.need(t, "step", w), f"{w}.step"),
                      r.bytes_(t.get("recv_bytes", 0), f"{w}.recv_bytes"),
                      r.bytes_(t.get("send_bytes", 0), f"{w}.send_bytes"),
                      seconds(t.get("other", []), f"{w}.other"))


def _flag(v, r: _Reader, where: str) -> bool:
    if not isinstance(v, bool):
        raise r.fail(where, f"expected true or false, found {_show(v)}")
    return v


def profile_from_dict(d: Any, source: str = "<profile>") -> Profile:
    r = _Reader(source)
    d = _check_schema(d, PROFILE_SCHEMA, r)
    model = _model(d, r)
    n = model.num_layers
    iso = [r.bytes_(v, f"mem_isolated[{i}]", nullable=True)
           for i, v in enumerate(r.lst(r.need(d, "mem_isolated", "top level"), "mem_isolated"))]
    added = [r.bytes_(v, f"mem_added[{i}]", nullable=True, signed=True)
             for i, v in enumerate(r.lst(r.need(d, "mem_added", "top level"), "mem_added"))]
    if len(iso) != n or len(added) != n:
        raise r.fail("top level", f"the model has {n} layers but mem_isolated has {len(iso)} entries "
                                  f"and mem_added has {len(added)}")
    if added[0] is not None:
        raise r.fail("mem_added[0]", f"layer 0 has no mem_added (expected null), found {added[0]}")
    _check_no_negative_stage(iso, added, r)
    extra = {k: v for k, v in d.items() if k not in _PROFILE_KEYS}
    return Profile(model=model, setup=_setup(d, r),
                   stats=LayerStats(mem_isolated=tuple(iso), mem_added=tuple(added)),
                   runs=_runs(d, r, n), extra=extra or None, machine=_machine(d, r),
                   variants=extras.variants_from_json(
                       d.get("variants", []), n, r.fail,
                       lambda items, where: _run_list(items, r, n, where, per_device=True)),
                   press=extras.press_from_json(d.get("press"), n, r.fail))


def _check_no_negative_stage(iso: list, added: list, r: _Reader) -> None:
    """No stage a..z may be predicted below 0 bytes: mem_isolated[a] + mem_added[a+1..z]
    (paper 3.3) is a stage's peak, which a real run never has negative. mem_added may be
    negative (a layer that frees its input), but not so much that a peak would be.

    O(L): with P the prefix sums of mem_added, the lowest peak of a stage starting at a is
    iso[a] + min over z >= a of (P[z] - P[a]), from the suffix minima of P."""
    n = len(iso)
    if any(v is None for v in iso) or any(v is None for v in added[1:]):
        return  # missing statistics are reported where they are used (check_stats)
    prefix = [0] * n
    for i in range(1, n):
        prefix[i] = prefix[i - 1] + added[i]
    lowest, at = prefix[n - 1], n - 1  # min of prefix[z] over z >= a, and where
    for a in range(n - 1, -1, -1):
        if prefix[a] < lowest:
            lowest, at = prefix[a], a
        peak = iso[a] + lowest - prefix[a]
        if peak < 0:
            raise r.fail("mem_added", f"layers {a}..{at} would have a predicted peak of {peak:,} "
                                      f"bytes (mem_isolated[{a}] {iso[a]:,} plus mem_added of layers "
                                      f"{a + 1}..{at}); a real stage's peak is never negative")


def sweep_from_dict(d: Any, source: str = "<sweep>") -> Sweep:
    r = _Reader(source)
    d = _check_schema(d, SWEEP_SCHEMA, r)
    model = _model(d, r)
    extra = {k: v for k, v in d.items() if k not in _SWEEP_KEYS}
    return Sweep(model=model, setup=_setup(d, r), runs=_runs(d, r, model.num_layers),
                 extra=extra or None, machine=_machine(d, r))


# --- files ---------------------------------------------------------------------------

def _read(path: Union[str, Path]) -> Any:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SchemaError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise SchemaError(f"{p}: is a folder, not a JSON file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{p}: cannot read it ({exc.__class__.__name__}: {exc})") from None
    if not text.strip():
        raise SchemaError(f"{p}: the file is empty, expected JSON")
    if "\x00" in text:
        raise SchemaError(f"{p}: holds NUL characters: a binary or UTF-16 file, expected UTF-8 JSON")
    _check_depth(text, p)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{p}: not valid JSON (truncated?) at line {exc.lineno} column {exc.colno}: {exc.msg}") \
            from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer, nesting past the check
        raise SchemaError(f"{p}: not usable JSON: {str(exc).splitlines()[0][:200]}") from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def _check_depth(text: str, p: Path) -> None:
    """Refuse nesting deeper than MAX_JSON_DEPTH before parsing (the parser would recurse
    until RecursionError). Brackets inside strings do not count."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            raise SchemaError(f"{p}: JSON nested deeper than {MAX_JSON_DEPTH} levels; an mcap "
                              f"file nests 4")


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
    or a full disk never leaves half a file, and an old file stays whole until replaced."""
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; a results file should be as readable as any other file
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return p
