"""A profile's or a sweep's parts agree with each other (issue 38, item 4). Pure.

Each part of a file or a store row passed its own checks (``mcap.core.fields``); this is the
file as a whole, checked wherever one is loaded: files (``mcap.io.jsonio``, so uploads and
the data folder too) and the store (``mcap.store.saved``, also before it writes one).
"""
from __future__ import annotations

from typing import Iterable

from mcap.core.fields import Reader
from mcap.core.types import ModelInfo, Run, Setup


def check(kind: str, model: ModelInfo, setup: Setup, runs: Iterable[Run], r: Reader) -> None:
    """A profile's or a sweep's parts agree with each other (issue 38, item 4: an upload with
    ``setup.stages`` 100 over 30 layers loaded, then crashed the Recommend page). Each part
    passed its own checks; here the file as a whole: at most one stage per layer, every run a
    partitioning of the model's layers into ``setup.stages`` stages, and no run marked ok
    above ``setup.capacity_bytes`` (a stage above the capacity is an oom run). Raises
    ``r``'s error saying the file is inconsistent and why, naming the values."""
    n, g = model.num_layers, setup.num_chunks
    if g > n:
        raise r.error(f"{r.source}: the {kind} is inconsistent: setup.stages is "
                      f"{setup.stages:,}{_times_virtual(setup)} but its model has {n} layers "
                      "(a stage holds at least one layer)")
    cap = setup.capacity_bytes
    for i, run in enumerate(runs):
        if len(run.balance) != g:
            raise r.error(f"{r.source}: the {kind} is inconsistent: runs[{i}] has "
                          f"{len(run.balance)} stages ({','.join(map(str, run.balance))}) but "
                          f"setup.stages is {setup.stages}{_times_virtual(setup)}")
        if cap is not None and run.status == "ok" and run.peaks and max(run.peaks) > cap:
            raise r.error(f"{r.source}: the {kind} is inconsistent: runs[{i}] is marked ok "
                          f"with a peak of {max(run.peaks):,} bytes, above its "
                          f"setup.capacity_bytes of {cap:,} (a stage above the capacity is an "
                          "oom run)")


def _times_virtual(setup: Setup) -> str:
    """`` x 2 virtual stages = 8 stages`` where a rank holds more than one stage."""
    v = setup.virtual_stages
    return "" if v == 1 else f" x {v} virtual stages = {setup.num_chunks} stages"
