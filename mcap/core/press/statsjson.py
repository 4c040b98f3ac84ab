"""The JSON form of a profile's MPress statistics (``Profile.press``), shared by the profile
file (``mcap.io.jsonio``) and the store. Pure.

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

Reading checks every value (``mcap.core.jsonvalues``): a file is data.
"""
from __future__ import annotations

from typing import Any, Optional

from mcap.core.jsonvalues import (
    MAX_BYTES, MAX_RATE, MAX_SECONDS, int_, list_, need, num, obj, show,
)
from mcap.core.types import PressStats


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


def press_from_json(x: Any, num_layers: int, fail) -> Optional[PressStats]:
    if x is None:
        return None
    x = obj(x, "press", fail)
    saved = tuple(int_(b, f"press.saved_bytes[{j}]", fail, 0, MAX_BYTES)
                  for j, b in enumerate(list_(need(x, "saved_bytes", "press", fail),
                                              "press.saved_bytes", fail, num_layers)))
    fwd = tuple(num(b, f"press.forward_seconds[{j}]", fail, MAX_SECONDS)
                for j, b in enumerate(list_(need(x, "forward_seconds", "press", fail),
                                            "press.forward_seconds", fail, num_layers)))
    host = num(need(x, "host_bandwidth", "press", fail), "press.host_bandwidth", fail, MAX_RATE)
    d2d = num(need(x, "d2d_bandwidth", "press", fail), "press.d2d_bandwidth", fail, MAX_RATE)
    bounds = ()
    if x.get("boundaries") is not None:  # absent in files written before it was measured
        rows = list_(x["boundaries"], "press.boundaries", fail, num_layers + 1)
        bounds = tuple(_boundary(row, f"press.boundaries[{b}]", num_layers, fail)
                       for b, row in enumerate(rows))
    shared = []
    for j, t in enumerate(list_(x.get("shared") or [], "press.shared", fail)):
        if not isinstance(t, list) or len(t) != 3:
            raise fail(f"press.shared[{j}]", f"expected [owner, last layer, bytes], found {t!r}")
        o = int_(t[0], f"press.shared[{j}][0]", fail, 0, num_layers - 1)
        shared.append((o, int_(t[1], f"press.shared[{j}][1]", fail, o + 1, num_layers - 1),
                       int_(t[2], f"press.shared[{j}][2]", fail, 0, MAX_BYTES)))
    backward = ()
    if x.get("backward_bytes") is not None:  # absent in files written before it was measured
        backward = tuple(int_(b, f"press.backward_bytes[{j}]", fail, 0, MAX_BYTES)
                         for j, b in enumerate(list_(x["backward_bytes"], "press.backward_bytes",
                                                     fail, num_layers)))
    back_t = _rows(x, "backward_transients", ("first", "accumulate", "swapped"), num_layers, fail)
    fwd_t = _rows(x, "forward_transients", ("keep", "swapped"), num_layers, fail)
    swap_s = ()
    if x.get("swap_seconds") is not None:  # absent in files written before it was measured
        swap_s = tuple(num(b, f"press.swap_seconds[{j}]", fail, MAX_SECONDS)
                       for j, b in enumerate(list_(x["swap_seconds"], "press.swap_seconds",
                                                   fail, num_layers)))
    rec_t = _rows(x, "recompute_transients", ("forward", "backward"), num_layers, fail)
    cores = None
    if x.get("cores") is not None:
        cores = int_(x["cores"], "press.cores", fail, 1, 2**20)
    segment = int_(x.get("segment_bytes", 0), "press.segment_bytes", fail, 0, MAX_BYTES)
    rec_s = ()
    if x.get("recompute_seconds") is not None:  # absent in files written before it was measured
        rec_s = tuple(num(b, f"press.recompute_seconds[{j}]", fail, MAX_SECONDS)
                      for j, b in enumerate(list_(x["recompute_seconds"],
                                                  "press.recompute_seconds", fail, num_layers)))
    gpus = None
    if x.get("gpus") is not None:  # CUDA profiles from issue 30 on
        gpus = int_(x["gpus"], "press.gpus", fail, 1, 2**16)
    return PressStats(saved, fwd, host, d2d, bounds, tuple(shared), backward, back_t, fwd_t,
                      swap_s, rec_t, cores, segment, rec_s, gpus)


def _rows(x: dict, key: str, names: tuple, num_layers: int, fail) -> tuple:
    """An optional per-layer list of byte tuples (absent in files written before it was
    measured)."""
    if x.get(key) is None:
        return ()
    rows = []
    for j, t in enumerate(list_(x[key], f"press.{key}", fail, num_layers)):
        if not isinstance(t, list) or len(t) != len(names):
            raise fail(f"press.{key}[{j}]",
                       f"expected [{', '.join(names)}] bytes, found {show(t)}")
        rows.append(tuple(int_(b, f"press.{key}[{j}][{k}]", fail, 0, MAX_BYTES)
                          for k, b in enumerate(t)))
    return tuple(rows)


def _boundary(row: Any, where: str, num_layers: int, fail) -> tuple[tuple[int, int], ...]:
    out = []
    for j, pair in enumerate(list_(row, where, fail)):
        if not isinstance(pair, list) or len(pair) != 2:
            raise fail(f"{where}[{j}]", f"expected [owner layer, bytes], found {pair!r}")
        out.append((int_(pair[0], f"{where}[{j}][0]", fail, -1, num_layers - 1),
                    int_(pair[1], f"{where}[{j}][1]", fail, 0, MAX_BYTES)))
    return tuple(out)
