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
    SHARED_FIELDS, RankCosts, RankEvaluation, check_balance, even, evaluate, event_model,
    is_multi, search)
from mcap.core.types import Profile, Run, Sweep
from mcap.figures.devices import DeviceBars
from mcap.io import orders

__all__ = ["Measured", "RankView", "SweepCheck", "Target", "check_sweep", "is_multi",
           "model_of", "pick", "predict", "sweep_mismatch", "targets"]


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


# --- a sweep against the op model (the Partition space page) ---------------------------------

@dataclass(frozen=True)
class Measured:
    """One measured partitioning of a sweep: each device's predicted and measured peak."""
    balance: tuple[int, ...]
    predicted: tuple[int, ...]
    measured: tuple[int, ...]

    @property
    def errors(self) -> tuple[float, ...]:
        """Each device's (predicted - measured) / measured."""
        return tuple((p - m) / m for p, m in zip(self.predicted, self.measured))


@dataclass(frozen=True)
class SweepCheck:
    """A sweep of a multi-chunk schedule against the profile's op model: every measured
    partitioning the model reads (sweep order), and ``evaluate``'s figures (per-device error,
    the exhaustive search's pick and its measured rank)."""
    target: Target
    evaluation: RankEvaluation
    measured: tuple[Measured, ...]

    @property
    def errors(self) -> tuple[float, ...]:
        """(predicted - measured) / measured of every device of every partitioning."""
        return tuple(e for m in self.measured for e in m.errors)


def sweep_mismatch(profile: Profile, model, sweep: Sweep) -> Optional[str]:
    """Why the op model of ``profile`` cannot predict ``sweep``'s measured devices (another
    model, a setup whose ops differ, a schedule and V whose op kinds the profile did not
    measure), naming the values; None when it can."""
    p, s = profile.setup, sweep.setup
    if sweep.model != profile.model:
        return (f"the profile is of {profile.model.spec!r} ({profile.model.num_layers} layers) "
                f"but the sweep of {sweep.model.spec!r} ({sweep.model.num_layers} layers)")
    diff = [f"{f} {getattr(p, f)!r} vs {getattr(s, f)!r}" for f in (*SHARED_FIELDS, "checkpoint")
            if getattr(p, f) != getattr(s, f)]
    if diff:
        return ("the profile and the sweep were measured under setups whose ops differ "
                "(profile vs sweep): " + "; ".join(diff))
    al = actions(s.schedule, s.stages, s.virtual_stages, s.chunks)
    if not model.covers(al):
        missing = sorted({a.kind for r in range(al.stages) for a in al.actions(r)} - model.kinds)
        return (f"the sweep was measured under {schedules.get(s.schedule).label} with "
                f"V={s.virtual_stages} on {s.stages} devices, which runs {', '.join(missing)} "
                f"ops; the profile, measured under {schedules.get(p.schedule).label} with "
                f"V={p.virtual_stages}, measures only {', '.join(sorted(model.kinds))} ops (a "
                "GPipe profile measures F and B, a zero-bubble one F, I and W)")
    return None


def check_sweep(profile: Profile, model, sweep: Sweep) -> SweepCheck:
    """``sweep``'s measured partitionings against ``profile``'s op model (McapError naming
    why when it cannot predict them: :func:`sweep_mismatch`; or when the sweep has no ok run).
    The figures are :func:`mcap.core.schedules.predict.evaluate`'s, the one computation the
    command line's ``evaluate`` prints."""
    why = sweep_mismatch(profile, model, sweep)
    if why is not None:
        raise McapError(why)
    s = sweep.setup
    ev = evaluate(model, sweep, actions)
    costs = RankCosts(model, actions(s.schedule, s.stages, s.virtual_stages, s.chunks))
    unread = set(ev.unpredicted)
    rows = tuple(Measured(tuple(r.balance), tuple(costs.peaks(r.balance)), tuple(r.peaks))
                 for r in sweep.runs
                 if r.status == "ok" and r.peaks and tuple(r.balance) not in unread)
    return SweepCheck(Target(s.schedule, s.virtual_stages), ev, rows)


def percent(x: Optional[float]) -> str:
    """A share as the page writes it: 0.0210 -> '2.10%'."""
    return "–" if x is None else f"{100 * x:.2f}%"


def space_metrics(check: SweepCheck) -> dict[str, str]:
    """The Partition space's metrics of a multi-chunk sweep, label -> value."""
    ev = check.evaluation
    return {"devices compared": f"{ev.ranks}",
            "median |error|": percent(ev.median),
            "p90 |error|": percent(ev.p90),
            "max |error|": percent(ev.max),
            "exact to the byte": f"{ev.exact} of {ev.ranks}"}


def pick_metrics(check: SweepCheck) -> dict[str, str]:
    """The op model's pick (the exhaustive search's, as on Recommend) and where the sweep
    ranks it by measured peak (1 = lowest), label -> value."""
    from mcap.core.units import fmt_bytes
    ev = check.evaluation
    return {"op model's pick": "-".join(map(str, ev.pick)),
            "its predicted peak": fmt_bytes(ev.pick_predicted),
            "its measured peak": "not measured" if ev.pick_measured is None
            else fmt_bytes(ev.pick_measured),
            "its measured rank": "not in this sweep" if ev.pick_rank is None
            else f"{ev.pick_rank} of {ev.partitionings}"}
