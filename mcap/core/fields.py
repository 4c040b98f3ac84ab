"""The one set of checks every record read from outside passes: JSON files
(``mcap.io.jsonio``) and store rows (``mcap.store.records``). Pure: no files.

A file and a store row are both data someone else wrote (issue 12, issue 28): every value is
checked for its type, its range and its length before it becomes a record, and a problem
raises the caller's error class (``SchemaError`` for files, ``StoreError`` for the store)
naming where it was found (``source: where: message``). Nothing here raises anything else:
text that is not JSON, nested too deep, or holding numbers Python cannot convert is a
refusal too (:func:`loads`).
"""
from __future__ import annotations

import dataclasses
import json
import math
import re
from typing import Any, Iterable, Optional

from mcap.core.errors import SchemaError
from mcap.core.machine import Machine
from mcap.core.types import (Layer, LayerStats, MemoryBreakdown, ModelInfo, Run, Setup,
                             StageTimes)

# Bounds on what a file or a row may say (issue 12): byte counts a machine can have (1 PiB
# per device), counts a run can have, so no number read overflows or poisons a sum.
MAX_BYTES = 2**50
MAX_COUNT = 2**31
MAX_SECONDS = 10**9
MAX_JSON_DEPTH = 64
# A model spec a file or row may name (a merged profile's spec lists its group sizes).
MAX_SPEC_CHARS = 8192

SETUP_FIELDS = ("stages", "batch_size", "chunks", "schedule", "checkpoint", "device",
                "capacity_bytes", "engine", "optimizer", "threads")
# written by files only where they differ from their default (issue 39)
LATER_SETUP_FIELDS = ("virtual_stages", "precision")
BREAKDOWN_FIELDS = ("weights", "gradients", "optimizer", "other")
STATUSES = ("ok", "oom", "failed")


class Reader:
    """Checks one document's fields; errors name the source and the path of the field.

    ``error``: the McapError subclass raised (SchemaError for files, StoreError for rows)."""

    def __init__(self, source: str, error: type = SchemaError):
        self.source = source
        self.error = error

    def fail(self, where: str, msg: str):
        return self.error(f"{self.source}: {where}: {msg}")

    def obj(self, v, where) -> dict:
        if not isinstance(v, dict):
            raise self.fail(where, f"expected an object, found {show(v)}")
        return v

    def lst(self, v, where) -> list:
        if not isinstance(v, list):
            raise self.fail(where, f"expected a list, found {show(v)}")
        return v

    def int_(self, v, where, nullable=False, low: Optional[int] = None,
             high: Optional[int] = None) -> Optional[int]:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(where, f"expected an integer, found {show(v)}")
        if (low is not None and v < low) or (high is not None and v > high):
            lo = "" if low is None else f"{low:,}"
            hi = "" if high is None else f"{high:,}"
            raise self.fail(where, f"{show(v)} is out of range [{lo}, {hi}]")
        return v

    def bytes_(self, v, where, nullable=False, signed=False) -> Optional[int]:
        """A byte count: 0..1 PiB (``signed``: -1 PiB..1 PiB, e.g. mem_added)."""
        return self.int_(v, where, nullable, -MAX_BYTES if signed else 0, MAX_BYTES)

    def num(self, v, where, nullable=False) -> Optional[float]:
        if v is None and nullable:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or \
                (isinstance(v, float) and math.isnan(v)):
            raise self.fail(where, f"expected a number, found {show(v)}")
        try:
            f = float(v)
        except OverflowError:
            f = math.inf
        if not 0 <= f <= MAX_SECONDS:
            raise self.fail(where, f"expected a finite number between 0 and {MAX_SECONDS:,}, "
                                   f"found {show(v)}")
        return f

    def str_(self, v, where, nullable=False) -> Optional[str]:
        if v is None and nullable:
            return None
        if not isinstance(v, str):
            raise self.fail(where, f"expected a string, found {show(v)}")
        return v

    def flag(self, v, where) -> bool:
        if not isinstance(v, bool):
            raise self.fail(where, f"expected true or false, found {show(v)}")
        return v

    def need(self, d: dict, key: str, where: str):
        if key not in d:
            raise self.fail(where, f"missing key {key!r}")
        return d[key]


def show(v: Any) -> str:
    """A value as a reader shows it in a message: JSON, at most 60 characters."""
    try:
        text = json.dumps(v) if not isinstance(v, float) or not math.isnan(v) else "NaN"
    except (ValueError, TypeError, RecursionError):  # huge ints, deep nesting, bytes
        text = f"<{type(v).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(r"[\[\]{}]")


def too_deep(text: str) -> bool:
    """True when ``text`` nests deeper than MAX_JSON_DEPTH (the parser would recurse until
    RecursionError). Brackets inside strings do not count."""
    depth = 0
    for m in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if m.group() in "[{" else -1
        if depth > MAX_JSON_DEPTH:
            return True
    return False


def loads(text, r: Reader, where: str):
    """JSON ``text`` (a store column) decoded, or ``r``'s error naming ``where``: text that
    is not a string, not JSON, nested past MAX_JSON_DEPTH, or holding a number Python
    cannot convert."""
    if isinstance(text, bytes):
        raise r.fail(where, f"expected JSON text, found {len(text)} bytes of binary data")
    if not isinstance(text, str):
        raise r.fail(where, f"expected JSON text, found {show(text)}")
    if too_deep(text):
        raise r.fail(where, f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise r.fail(where, f"not valid JSON ({exc.msg} at character {exc.pos}): "
                            f"{show(text)}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit integer
        raise r.fail(where, f"not usable JSON: {str(exc).splitlines()[0][:200]}") from None


# --- records ------------------------------------------------------------------------------

def layers(items, r: Reader, where: str = "model.layers") -> tuple[Layer, ...]:
    out = []
    for i, l in enumerate(r.lst(items, where)):
        w = f"{where}[{i}]"
        l = r.obj(l, w)
        out.append(Layer(name=r.str_(r.need(l, "name", w), f"{w}.name"),
                         param_bytes=r.bytes_(r.need(l, "param_bytes", w), f"{w}.param_bytes"),
                         kind=r.str_(l.get("kind", ""), f"{w}.kind"),
                         out_bytes=r.bytes_(l.get("out_bytes", 0), f"{w}.out_bytes")))
    if not out:
        raise r.fail(where, "the model has no layers")
    return tuple(out)


def model(m, r: Reader, where: str = "model") -> ModelInfo:
    m = r.obj(m, where)
    spec = r.str_(r.need(m, "spec", where), f"{where}.spec")
    if len(spec) > MAX_SPEC_CHARS:
        raise r.fail(f"{where}.spec", f"a spec of {len(spec):,} characters, above the limit of "
                                      f"{MAX_SPEC_CHARS:,}: {show(spec)}")
    return ModelInfo(spec=spec, layers=layers(r.need(m, "layers", where), r, f"{where}.layers"))


def setup(s, r: Reader, where: str = "setup", required: Iterable[str] = ("stages",),
          press: bool = False) -> Setup:
    """A Setup from an object. ``required``: the fields that must be present (a file may
    leave out what older versions did not write; a store row holds every field of schema
    version 1). ``press``: read ``Setup.press`` too (store rows; files never carry it)."""
    s = r.obj(s, where)
    for k in required:
        if k not in s and not (k == "device" and "backend" in s):
            raise r.fail(where, f"missing key {k!r}")
    kw = {"stages": r.int_(r.need(s, "stages", where), f"{where}.stages", low=1,
                           high=MAX_COUNT)}
    for k in ("batch_size", "chunks", "threads", "virtual_stages"):
        if k in s:
            kw[k] = r.int_(s[k], f"{where}.{k}", low=1, high=MAX_COUNT)
    for k in ("schedule", "checkpoint", "device", "engine", "optimizer", "precision") + \
            (("press",) if press else ()):
        if k in s:
            kw[k] = r.str_(s[k], f"{where}.{k}")
    if "device" not in s and "backend" in s:  # written before device was renamed
        kw["device"] = r.str_(s["backend"], f"{where}.backend")
    if "capacity_bytes" in s:
        kw["capacity_bytes"] = r.int_(s["capacity_bytes"], f"{where}.capacity_bytes",
                                      nullable=True, low=1, high=MAX_BYTES)
    return Setup(**kw)


def machine(m, r: Reader, where: str = "machine") -> Optional[Machine]:
    """A Machine from an object; None stays None ("machine unknown")."""
    if m is None:
        return None
    m = r.obj(m, where)
    kw = {}
    for f in dataclasses.fields(Machine):
        w = f"{where}.{f.name}"
        required = f.default is dataclasses.MISSING
        if f.name not in m:
            if required:
                raise r.fail(where, f"missing key {f.name!r}")
            continue
        kw[f.name] = r.int_(m[f.name], w, low=0, high=MAX_COUNT) if f.name == "threads" else \
            r.str_(m[f.name], w, nullable=not required)
    return Machine(**kw)


def balance(items, r: Reader, where: str, num_layers: Optional[int]) -> tuple[int, ...]:
    """A partitioning of ``num_layers`` layers (None: any number of layers)."""
    bal = tuple(r.int_(b, where, low=1, high=MAX_COUNT) for b in r.lst(items, where))
    if not bal or (num_layers is not None and sum(bal) != num_layers):
        raise r.fail(where, f"inconsistent: balance {list(bal)[:20]} (sum {sum(bal):,}) is not "
                            f"a partitioning of {num_layers} layers")
    return bal


def status(v, r: Reader, where: str) -> str:
    if v not in STATUSES:
        raise r.fail(where, f"expected \"ok\", \"oom\" or \"failed\", found {show(v)}")
    return v


def peaks(items, r: Reader, where: str, stages: int, per_device: bool = False
          ) -> Optional[tuple[int, ...]]:
    """Per-stage peaks (``per_device``: a hybrid run's, at least one per stage)."""
    if items is None:
        return None
    out = tuple(r.bytes_(p, where) for p in r.lst(items, where))
    if len(out) != stages and not (per_device and len(out) > stages):
        raise r.fail(where, f"inconsistent: {len(out)} peaks for {stages} stages")
    return out


def breakdown_item(b, r: Reader, where: str) -> MemoryBreakdown:
    b = r.obj(b, where)
    return MemoryBreakdown(**{k: r.bytes_(r.need(b, k, where), f"{where}.{k}", signed=True)
                              for k in BREAKDOWN_FIELDS})


def breakdowns(items, r: Reader, where: str, stages: Optional[int] = None
               ) -> Optional[tuple[MemoryBreakdown, ...]]:
    if items is None:
        return None
    out = tuple(breakdown_item(b, r, f"{where}[{j}]") for j, b in enumerate(r.lst(items, where)))
    if stages is not None and len(out) != stages:
        raise r.fail(where, f"inconsistent: a breakdown of {len(out)} stages for {stages} stages")
    return out


def stage_times(t, r: Reader, w: str) -> StageTimes:
    """One stage's times (``StageTimes``): lists of seconds per iteration and micro-batch
    (each 0 .. MAX_SECONDS)."""
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
                      seconds(t.get("other", []), f"{w}.other"),
                      memory_events(t.get("memory", []), r, f"{w}.memory"))


# forward, backward (B whole; I for inputs and W for weights under zero bubble), optimizer
# step, between them
MEMORY_KINDS = ("F", "B", "I", "W", "S", "-")


def memory_event_to_list(e) -> list:
    """One event of a measured memory timeline as JSON values: [kind, iteration,
    micro-batch, bytes before, peak inside, bytes after(, chunk)]."""
    kind, it, mb, before, peak, after = e[:6]
    out = [str(kind), int(it), int(mb), int(before), int(peak), int(after)]
    return out + [int(e[6])] if len(e) > 6 else out


def memory_events(items, r: Reader, w: str) -> tuple:
    """A measured memory timeline (``StageTimes.memory``): lists of [kind, iteration,
    micro-batch (-1: none), bytes before, peak inside, bytes after] and, for a rank of a
    multi-stage schedule, the chunk (torch's stage index, -1: none) as a 7th value."""
    out = []
    for k, e in enumerate(r.lst(items, w)):
        where = f"{w}[{k}]"
        e = r.lst(e, where)
        if len(e) not in (6, 7):
            raise r.fail(where, f"expected [kind, iteration, micro-batch, before, peak, "
                                f"after(, chunk)], found {len(e)} values")
        kind = e[0]
        if kind not in MEMORY_KINDS:
            raise r.fail(f"{where}[0]", f"expected one of {', '.join(MEMORY_KINDS)}, found "
                                        f"{kind!r:.40}")
        it = r.int_(e[1], f"{where}[1]", low=0, high=MAX_COUNT)
        mb = r.int_(e[2], f"{where}[2]", low=-1, high=MAX_COUNT)
        before, peak, after = (r.bytes_(e[j], f"{where}[{j}]") for j in (3, 4, 5))
        chunk = (r.int_(e[6], f"{where}[6]", low=-1, high=MAX_COUNT),) if len(e) == 7 else ()
        out.append((kind, it, mb, before, peak, after, *chunk))
    return tuple(out)


def times_list(items, r: Reader, where: str, stages: int) -> Optional[tuple[StageTimes, ...]]:
    if items is None:
        return None
    out = tuple(stage_times(t, r, f"{where}[{j}]") for j, t in enumerate(r.lst(items, where)))
    if len(out) != stages:
        raise r.fail(where, f"inconsistent: {len(out)} stages' times for {stages} stages")
    return out


def run_list(items, r: Reader, num_layers: int, where: str,
             per_device: bool = False, virtual: int = 1) -> tuple[Run, ...]:
    """Runs from a list of objects (the file form, ``mcap.io.jsonio.run_to_dict``).
    ``per_device``: a hybrid run (dp/tp stages) has one peak per device, at least one per
    stage. ``virtual``: stages per rank (``Setup.virtual_stages``): a balance has that many
    chunks per rank, and the peaks, breakdowns and times are one per rank."""
    out = []
    for i, x in enumerate(r.lst(items, where)):
        w = f"{where}[{i}]"
        x = r.obj(x, w)
        bal = balance(r.need(x, "balance", w), r, f"{w}.balance", num_layers)
        if len(bal) % virtual:
            raise r.fail(f"{w}.balance", f"balance {list(bal)} has {len(bal)} chunks, not a "
                                         f"multiple of {virtual} stages per rank")
        ranks = len(bal) // virtual
        st = status(r.need(x, "status", w), r, f"{w}.status")
        pk = peaks(x.get("peaks"), r, f"{w}.peaks", ranks, per_device)
        if st == "ok" and pk is None:
            raise r.fail(f"{w}.peaks", "an ok run needs its per-stage peaks")
        out.append(Run(balance=bal, status=st, peaks=pk,
                       seconds=r.num(x.get("seconds", 0.0), f"{w}.seconds"),
                       samples_per_second=r.num(x.get("samples_per_second"),
                                                f"{w}.samples_per_second", nullable=True),
                       error=r.str_(x.get("error"), f"{w}.error", nullable=True),
                       breakdown=breakdowns(x.get("breakdown"), r, f"{w}.breakdown"),
                       composed=r.flag(x.get("composed", False), f"{w}.composed"),
                       times=times_list(x.get("times"), r, f"{w}.times", ranks),
                       estimated=r.flag(x.get("estimated", False), f"{w}.estimated")))
    return tuple(out)


def stats(iso_items, added_items, r: Reader, num_layers: int,
          where: tuple[str, str] = ("mem_isolated", "mem_added")) -> LayerStats:
    """mCAP's per-layer statistics: one value per layer each, mem_added[0] null, and no
    stage predicted below 0 bytes."""
    iso = [r.bytes_(v, f"{where[0]}[{i}]", nullable=True)
           for i, v in enumerate(r.lst(iso_items, where[0]))]
    added = [r.bytes_(v, f"{where[1]}[{i}]", nullable=True, signed=True)
             for i, v in enumerate(r.lst(added_items, where[1]))]
    if len(iso) != num_layers or len(added) != num_layers:
        raise r.fail("top level", f"inconsistent: the model has {num_layers} layers but "
                                  f"{where[0]} has {len(iso)} entries and {where[1]} has "
                                  f"{len(added)}")
    if added[0] is not None:
        raise r.fail(f"{where[1]}[0]", f"layer 0 has no mem_added (expected null), found "
                                       f"{added[0]}")
    check_no_negative_stage(iso, added, r, where[1])
    return LayerStats(mem_isolated=tuple(iso), mem_added=tuple(added))


def check_no_negative_stage(iso: list, added: list, r: Reader, where: str = "mem_added") -> None:
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
            raise r.fail(where, f"layers {a}..{at} would have a predicted peak of {peak:,} "
                                f"bytes (mem_isolated[{a}] {iso[a]:,} plus mem_added of layers "
                                f"{a + 1}..{at}); a real stage's peak is never negative")
