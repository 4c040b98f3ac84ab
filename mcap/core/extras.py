"""The JSON form of a profile's CAPTURE and MPress statistics (``Profile.variants``,
``Profile.press``), shared by the profile file (``mcap.io.jsonio``) and the store. Pure.

    "variants": [{"batch_size": 8, "parallel": "dp", "degree": 2,
                  "mem_isolated": [int, ...], "mem_added": [null, int, ...], "runs": [...]}],
    "press": {"saved_bytes": [int, ...], "forward_seconds": [float, ...],
              "host_bandwidth": float, "d2d_bandwidth": float,
              "boundaries": [[[owner, bytes], ...], ...],    (optional: num_layers + 1 lists)
              "shared": [[owner, last, bytes], ...],         (optional)
              "backward_bytes": [int, ...],                  (optional: num_layers ints)
              "backward_transients": [[first, accumulate, swapped], ...],  (optional)
              "forward_transients": [[keep, swapped], ...],                (optional)
              "swap_seconds": [float, ...],                                (optional)
              "recompute_transients": [[forward, backward], ...],          (optional)
              "cores": int,                                                (optional)
              "segment_bytes": int,                                        (optional)
              "recompute_seconds": [float, ...],                           (optional)
              "gpus": int}                                                 (optional, CUDA)

Reading checks every value (a file is data: types, ranges, lengths) and raises through the
caller's ``fail(where, message)`` so the message names the file and the key. Runs are read
by the caller's ``read_runs(list, where)`` (the profile's own run reader).
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional

from mcap.core.types import LayerStats, PressStats, Run, VariantStats

PARALLEL = ("pp", "dp", "tp")
MAX_BYTES = 2**50
MAX_DEGREE = 2**16
MAX_BATCH = 2**31
MAX_RATE = 1e15  # bytes per second
MAX_SECONDS = 1e9


def variants_to_json(variants, run_to_dict: Callable[[Run], dict]) -> list[dict]:
    return [{"batch_size": int(v.batch_size), "parallel": v.parallel, "degree": int(v.degree),
             "mem_isolated": [int(x) for x in v.stats.mem_isolated],
             "mem_added": [None if x is None else int(x) for x in v.stats.mem_added],
             "runs": [run_to_dict(r) for r in v.runs]} for v in variants]


def press_to_json(press: PressStats) -> dict:
    return {"saved_bytes": [int(x) for x in press.saved_bytes],
            "forward_seconds": [float(x) for x in press.forward_seconds],
            "host_bandwidth": float(press.host_bandwidth),
            "d2d_bandwidth": float(press.d2d_bandwidth),
            **({"boundaries": [[[int(o), int(b)] for o, b in pairs] for pairs in press.boundaries]}
               if press.boundaries else {}),
            **({"shared": [[int(o), int(k), int(n)] for o, k, n in press.shared]}
               if press.shared else {}),
            **({"backward_bytes": [int(x) for x in press.backward_bytes]}
               if press.backward_bytes else {}),
            **({"backward_transients": [[int(x) for x in t] for t in press.backward_transients]}
               if press.backward_transients else {}),
            **({"forward_transients": [[int(x) for x in t] for t in press.forward_transients]}
               if press.forward_transients else {}),
            **({"swap_seconds": [float(x) for x in press.swap_seconds]}
               if press.swap_seconds else {}),
            **({"recompute_transients": [[int(x) for x in t]
                                         for t in press.recompute_transients]}
               if press.recompute_transients else {}),
            **({"cores": int(press.cores)} if press.cores else {}),
            **({"segment_bytes": int(press.segment_bytes)} if press.segment_bytes else {}),
            **({"recompute_seconds": [float(x) for x in press.recompute_seconds]}
               if press.recompute_seconds else {}),
            **({"gpus": int(press.gpus)} if press.gpus else {})}


def _show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _int(v, where, fail, low, high, nullable=False):
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise fail(where, f"expected an integer, found {_show(v)}")
    if not low <= v <= high:
        raise fail(where, f"{_show(v)} is out of range [{low:,}, {high:,}]")
    return v


def _num(v, where, fail, high):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise fail(where, f"expected a number, found {_show(v)}")
    try:
        f = float(v)
    except OverflowError:  # an int beyond float's range
        f = math.inf
    if math.isnan(f) or not 0 <= f <= high:
        raise fail(where, f"expected a finite number between 0 and {high:g}, found {_show(v)}")
    return f


def _list(v, where, fail, length: Optional[int] = None) -> list:
    if not isinstance(v, list):
        raise fail(where, f"expected a list, found {_show(v)}")
    if length is not None and len(v) != length:
        raise fail(where, f"expected {length} entries (one per layer), found {len(v)}")
    return v


def _obj(v, where, fail) -> dict:
    if not isinstance(v, dict):
        raise fail(where, f"expected an object, found {_show(v)}")
    return v


def _need(d: dict, key: str, where: str, fail):
    if key not in d:
        raise fail(where, f"missing key {key!r}")
    return d[key]


def variants_from_json(x: Any, num_layers: int, fail, read_runs) -> tuple[VariantStats, ...]:
    out, seen = [], set()
    for i, v in enumerate(_list(x, "variants", fail)):
        w = f"variants[{i}]"
        v = _obj(v, w, fail)
        batch = _int(_need(v, "batch_size", w, fail), f"{w}.batch_size", fail, 1, MAX_BATCH)
        parallel = v.get("parallel", "pp")
        if parallel not in PARALLEL:
            raise fail(f"{w}.parallel", f"expected one of {', '.join(PARALLEL)}, found "
                                        f"{_show(parallel)}")
        degree = _int(v.get("degree", 1), f"{w}.degree", fail, 1, MAX_DEGREE)
        if (parallel == "pp") != (degree == 1):
            raise fail(w, f"parallel {parallel} with degree {degree}: pp has degree 1 and "
                          "dp/tp at least 2")
        iso = tuple(_int(b, f"{w}.mem_isolated[{j}]", fail, 0, MAX_BYTES, nullable=True)
                    for j, b in enumerate(_list(_need(v, "mem_isolated", w, fail),
                                                f"{w}.mem_isolated", fail, num_layers)))
        added = tuple(_int(b, f"{w}.mem_added[{j}]", fail, -MAX_BYTES, MAX_BYTES, nullable=True)
                      for j, b in enumerate(_list(_need(v, "mem_added", w, fail),
                                                  f"{w}.mem_added", fail, num_layers)))
        if added and added[0] is not None:
            raise fail(f"{w}.mem_added[0]", f"layer 0 has no mem_added (expected null), found "
                                            f"{added[0]}")
        key = (batch, parallel, degree)
        if key in seen:
            raise fail(w, f"batch size {batch}, {parallel} degree {degree} appears twice")
        seen.add(key)
        runs = read_runs(_list(v.get("runs", []), f"{w}.runs", fail), f"{w}.runs")
        out.append(VariantStats(batch, LayerStats(iso, added), parallel, degree, tuple(runs)))
    return tuple(out)


def press_from_json(x: Any, num_layers: int, fail) -> Optional[PressStats]:
    if x is None:
        return None
    x = _obj(x, "press", fail)
    saved = tuple(_int(b, f"press.saved_bytes[{j}]", fail, 0, MAX_BYTES)
                  for j, b in enumerate(_list(_need(x, "saved_bytes", "press", fail),
                                              "press.saved_bytes", fail, num_layers)))
    fwd = tuple(_num(b, f"press.forward_seconds[{j}]", fail, MAX_SECONDS)
                for j, b in enumerate(_list(_need(x, "forward_seconds", "press", fail),
                                            "press.forward_seconds", fail, num_layers)))
    host = _num(_need(x, "host_bandwidth", "press", fail), "press.host_bandwidth", fail, MAX_RATE)
    d2d = _num(_need(x, "d2d_bandwidth", "press", fail), "press.d2d_bandwidth", fail, MAX_RATE)
    bounds = ()
    if x.get("boundaries") is not None:  # absent in files written before it was measured
        rows = _list(x["boundaries"], "press.boundaries", fail, num_layers + 1)
        bounds = tuple(_boundary(row, f"press.boundaries[{b}]", num_layers, fail)
                       for b, row in enumerate(rows))
    shared = []
    for j, t in enumerate(_list(x.get("shared") or [], "press.shared", fail)):
        if not isinstance(t, list) or len(t) != 3:
            raise fail(f"press.shared[{j}]", f"expected [owner, last layer, bytes], found {t!r}")
        o = _int(t[0], f"press.shared[{j}][0]", fail, 0, num_layers - 1)
        shared.append((o, _int(t[1], f"press.shared[{j}][1]", fail, o + 1, num_layers - 1),
                       _int(t[2], f"press.shared[{j}][2]", fail, 0, MAX_BYTES)))
    backward = ()
    if x.get("backward_bytes") is not None:  # absent in files written before it was measured
        backward = tuple(_int(b, f"press.backward_bytes[{j}]", fail, 0, MAX_BYTES)
                         for j, b in enumerate(_list(x["backward_bytes"], "press.backward_bytes",
                                                     fail, num_layers)))
    back_t = _rows(x, "backward_transients", ("first", "accumulate", "swapped"), num_layers, fail)
    fwd_t = _rows(x, "forward_transients", ("keep", "swapped"), num_layers, fail)
    swap_s = ()
    if x.get("swap_seconds") is not None:  # absent in files written before it was measured
        swap_s = tuple(_num(b, f"press.swap_seconds[{j}]", fail, MAX_SECONDS)
                       for j, b in enumerate(_list(x["swap_seconds"], "press.swap_seconds",
                                                   fail, num_layers)))
    rec_t = _rows(x, "recompute_transients", ("forward", "backward"), num_layers, fail)
    cores = None
    if x.get("cores") is not None:
        cores = _int(x["cores"], "press.cores", fail, 1, 2**20)
    segment = _int(x.get("segment_bytes", 0), "press.segment_bytes", fail, 0, MAX_BYTES)
    rec_s = ()
    if x.get("recompute_seconds") is not None:  # absent in files written before it was measured
        rec_s = tuple(_num(b, f"press.recompute_seconds[{j}]", fail, MAX_SECONDS)
                      for j, b in enumerate(_list(x["recompute_seconds"],
                                                  "press.recompute_seconds", fail, num_layers)))
    gpus = None
    if x.get("gpus") is not None:  # CUDA profiles from issue 30 on
        gpus = _int(x["gpus"], "press.gpus", fail, 1, 2**16)
    return PressStats(saved, fwd, host, d2d, bounds, tuple(shared), backward, back_t, fwd_t,
                      swap_s, rec_t, cores, segment, rec_s, gpus)


def _rows(x: dict, key: str, names: tuple, num_layers: int, fail) -> tuple:
    """An optional per-layer list of byte tuples (absent in files written before it was
    measured)."""
    if x.get(key) is None:
        return ()
    rows = []
    for j, t in enumerate(_list(x[key], f"press.{key}", fail, num_layers)):
        if not isinstance(t, list) or len(t) != len(names):
            raise fail(f"press.{key}[{j}]",
                       f"expected [{', '.join(names)}] bytes, found {_show(t)}")
        rows.append(tuple(_int(b, f"press.{key}[{j}][{k}]", fail, 0, MAX_BYTES)
                          for k, b in enumerate(t)))
    return tuple(rows)


def _boundary(row: Any, where: str, num_layers: int, fail) -> tuple[tuple[int, int], ...]:
    out = []
    for j, pair in enumerate(_list(row, where, fail)):
        if not isinstance(pair, list) or len(pair) != 2:
            raise fail(f"{where}[{j}]", f"expected [owner layer, bytes], found {pair!r}")
        out.append((_int(pair[0], f"{where}[{j}][0]", fail, -1, num_layers - 1),
                    _int(pair[1], f"{where}[{j}][1]", fail, 0, MAX_BYTES)))
    return tuple(out)
