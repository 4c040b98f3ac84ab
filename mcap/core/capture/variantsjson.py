"""The JSON form of a profile's CAPTURE variants (``Profile.variants``: statistics per batch
size and dp/tp degree), shared by the profile file (``mcap.io.jsonio``) and the store. Pure.

    "variants": [{"batch_size": 8, "parallel": "dp", "degree": 2,
                  "mem_isolated": [int, ...], "mem_added": [null, int, ...], "runs": [...]}]

Reading checks every value (``mcap.core.jsonvalues``); runs are read by the caller's
``read_runs(list, where)`` (the profile's own run reader).
"""
from __future__ import annotations

from typing import Any, Callable

from mcap.core.jsonvalues import MAX_BATCH, MAX_BYTES, MAX_DEGREE, int_, list_, need, obj, show
from mcap.core.types import LayerStats, Run, VariantStats

PARALLEL = ("pp", "dp", "tp")


def variants_to_json(variants, run_to_dict: Callable[[Run], dict]) -> list[dict]:
    return [{"batch_size": int(v.batch_size), "parallel": v.parallel, "degree": int(v.degree),
             "mem_isolated": [int(x) for x in v.stats.mem_isolated],
             "mem_added": [None if x is None else int(x) for x in v.stats.mem_added],
             "runs": [run_to_dict(r) for r in v.runs]} for v in variants]


def variants_from_json(x: Any, num_layers: int, fail, read_runs) -> tuple[VariantStats, ...]:
    out, seen = [], set()
    for i, v in enumerate(list_(x, "variants", fail)):
        w = f"variants[{i}]"
        v = obj(v, w, fail)
        batch = int_(need(v, "batch_size", w, fail), f"{w}.batch_size", fail, 1, MAX_BATCH)
        parallel = v.get("parallel", "pp")
        if parallel not in PARALLEL:
            raise fail(f"{w}.parallel", f"expected one of {', '.join(PARALLEL)}, found "
                                        f"{show(parallel)}")
        degree = int_(v.get("degree", 1), f"{w}.degree", fail, 1, MAX_DEGREE)
        if (parallel == "pp") != (degree == 1):
            raise fail(w, f"parallel {parallel} with degree {degree}: pp has degree 1 and "
                          "dp/tp at least 2")
        iso = tuple(int_(b, f"{w}.mem_isolated[{j}]", fail, 0, MAX_BYTES, nullable=True)
                    for j, b in enumerate(list_(need(v, "mem_isolated", w, fail),
                                                f"{w}.mem_isolated", fail, num_layers)))
        added = tuple(int_(b, f"{w}.mem_added[{j}]", fail, -MAX_BYTES, MAX_BYTES, nullable=True)
                      for j, b in enumerate(list_(need(v, "mem_added", w, fail),
                                                  f"{w}.mem_added", fail, num_layers)))
        if added and added[0] is not None:
            raise fail(f"{w}.mem_added[0]", f"layer 0 has no mem_added (expected null), found "
                                            f"{added[0]}")
        key = (batch, parallel, degree)
        if key in seen:
            raise fail(w, f"batch size {batch}, {parallel} degree {degree} appears twice")
        seen.add(key)
        runs = read_runs(list_(v.get("runs", []), f"{w}.runs", fail), f"{w}.runs")
        out.append(VariantStats(batch, LayerStats(iso, added), parallel, degree, tuple(runs)))
    return tuple(out)
