"""Rank by rank, for the pages: a profile measured under a multi-chunk schedule (interleaved
1F1B, looped BFS, zero bubble, ZBV, DualPipeV, or V > 1) is predicted by the schedules' op
model (:mod:`mcap.core.schedules.predict`, issue 39, item 1: "the pages"), not by mCAP's
per-stage statistics, which cannot read its per-chunk windows.

The action lists come from :mod:`mcap.io.orders` (torch's own lists, read in a child process:
the dashboard server never imports torch). No Streamlit here; the pages draw what this returns.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.partition import windows
from mcap.core.schedules.actions import ActionList
from mcap.core.schedules.predict import (
    SHARED_FIELDS, RankCosts, check_balance, even, event_model, is_multi, search)
from mcap.core.types import Profile, Run, Sweep
from mcap.figures.devices import DeviceBars
from mcap.io import orders

__all__ = ["RankView", "Target", "is_multi", "model_of", "pick", "predict", "targets"]


def actions(schedule: str, stages: int, virtual: int, chunks: int) -> ActionList:
    return orders.action_list(schedule, stages, virtual, chunks)


def model_of(profile: Profile):
    """The op model of ``profile`` (McapError when it records no op timelines)."""
    return event_model([profile], actions)


@dataclass(frozen=True)
class Target:
    """A schedule and V the profile's op model can predict, on the profile's ranks."""
    schedule: str
    virtual: int

    @property
    def label(self) -> str:
        return f"{schedules.get(self.schedule).label} (V={self.virtual})" if self.virtual > 1 \
            else schedules.get(self.schedule).label


def targets(profile: Profile, model) -> tuple[tuple[Target, ...], tuple[str, ...]]:
    """Every schedule the op model covers on the profile's ranks and micro-batches (the
    profile's own at its V, the others at their default V: one per schedule), the profile's
    own first; and why the others are not offered, one line each."""
    s = profile.setup
    wanted, why = [], []
    for name in schedules.names():
        spec = schedules.get(name)
        v = s.virtual_stages if name == s.schedule else spec.virtual(None)
        try:
            spec.check(s.stages, v, s.chunks, profile.model.num_layers)
        except McapError as exc:
            why.append(f"{spec.label}: {exc}")
            continue
        wanted.append((name, v))
    got = orders.answers([(n, s.stages, v, s.chunks) for n, v in wanted])
    out = []
    for name, v in wanted:
        al = got[(name, s.stages, v, s.chunks)]
        if isinstance(al, McapError):
            why.append(f"{schedules.get(name).label}: {al}")
        elif not model.covers(al):
            kinds = sorted({a.kind for r in range(al.stages) for a in al.actions(r)} - model.kinds)
            why.append(f"{schedules.get(name).label}: runs {', '.join(kinds)} ops, which a "
                       f"{s.schedule} profile does not measure")
        else:
            out.append(Target(name, v))
    out.sort(key=lambda t: t.schedule != s.schedule)
    return tuple(out), tuple(why)


@dataclass(frozen=True)
class RankView:
    """One partitioning of G·V chunks under a schedule: each rank's chunks, predicted peak and,
    where a sweep of the same setup measured it, measured peak."""
    target: Target
    balance: tuple[int, ...]
    placement: tuple[tuple[int, ...], ...]
    predicted: tuple[int, ...]
    run: Optional[Run]

    @property
    def chunks_text(self) -> tuple[str, ...]:
        wins = windows(self.balance)
        return tuple(", ".join(f"{wins[c][0]}-{wins[c][1]}" for c in held)
                     for held in self.placement)

    def bars(self, capacity: Optional[int] = None) -> DeviceBars:
        """The Predict page's device bars, one per rank (layers: its chunks)."""
        wins = windows(self.balance)
        per_rank = tuple(sum(wins[c][1] - wins[c][0] + 1 for c in held)
                         for held in self.placement)
        measured = tuple(self.run.peaks) if self.run is not None and self.run.status == "ok" \
            and self.run.peaks else None
        return DeviceBars(per_rank, self.chunks_text, self.predicted, measured,
                          None if self.run is None else self.run.status, capacity)


def default_balance(profile: Profile, target: Target) -> tuple[int, ...]:
    return even(profile.model.num_layers, profile.setup.stages * target.virtual)


def _measured(sweep: Optional[Sweep], profile: Profile, target: Target,
              balance: Sequence[int]) -> Optional[Run]:
    """The sweep's run of ``balance`` when the sweep was measured under this very setup."""
    if sweep is None or sweep.model != profile.model:
        return None
    s, p = sweep.setup, profile.setup
    if (s.schedule, s.virtual_stages) != (target.schedule, target.virtual) or any(
            getattr(s, f) != getattr(p, f) for f in (*SHARED_FIELDS, "stages", "checkpoint")):
        return None
    return next((r for r in sweep.runs if tuple(r.balance) == tuple(balance)), None)


def predict(profile: Profile, model, target: Target, balance: Sequence[int],
            sweep: Optional[Sweep] = None) -> RankView:
    """Every rank's predicted peak for ``balance`` under ``target`` (McapError naming a bad
    balance: its length must be G·V, its counts positive and summing to the layers)."""
    s = profile.setup
    al = actions(target.schedule, s.stages, target.virtual, s.chunks)
    b = check_balance(balance, al.num_chunks, profile.model.num_layers)
    peaks = model.rank_peaks(b, al)
    return RankView(target, b, al.placement, tuple(peaks), _measured(sweep, profile, target, b))


def pick(profile: Profile, model, target: Target, sweep: Optional[Sweep] = None):
    """The partitioning with the lowest predicted peak under ``target`` (every partitioning
    where there are at most ``MAX_ENUMERATED``, else a local search that says so), as a
    :class:`RankView`, and whether the search was exhaustive."""
    s = profile.setup
    al = actions(target.schedule, s.stages, target.virtual, s.chunks)
    found = search(RankCosts(model, al))
    return RankView(target, tuple(found.balance), al.placement, tuple(found.peaks),
                    _measured(sweep, profile, target, found.balance)), found.exhaustive
