"""The measured memory timeline of a run, device by device (issue 26, item 2). Pure.

A stage run alone records, for every forward, backward and optimizer step and for the
schedule's work between them, the bytes it held before, the highest inside and the bytes
after (``StageTimes.memory``, ``mcap.runner.alone.StageTimer``). This module turns that
into what the teaching page draws and says: per device the events in the order the stage
ran them, where its peak was, and how that compares with where the schedule model
(``mcap.core.timeline``) puts it. Nothing here is inferred: a sentence is made only from
what the events show.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.types import Run

NAMES = {"F": "forward", "B": "backward", "S": "optimizer step", "-": "between ops"}


@dataclass(frozen=True)
class Event:
    device: int
    order: int        # position in the device's own sequence
    iteration: int
    kind: str         # F, B, S or "-"
    micro: int        # -1: no micro-batch (a step, or the work between ops)
    before: int
    peak: int
    after: int

    @property
    def label(self) -> str:
        if self.kind in ("F", "B"):
            return f"{self.kind}{self.micro}"
        return "step" if self.kind == "S" else "·"


def events(run: Optional[Run]) -> Optional[tuple[tuple[Event, ...], ...]]:
    """Per device its measured events, or None when the run recorded no timeline."""
    if run is None or run.status != "ok" or not run.times or \
            any(not t.memory for t in run.times):
        return None
    return tuple(tuple(Event(d, i, it, kind, mb, b, p, a)
                       for i, (kind, it, mb, b, p, a) in enumerate(e[:6] for e in t.memory))
                 for d, t in enumerate(run.times))


def peak_event(evs: Sequence[Event]) -> Event:
    """The event holding the device's peak (the first, if several reach it)."""
    return max(evs, key=lambda e: (e.peak, -e.order))


def sentences(evs: tuple[tuple[Event, ...], ...], predicted: Sequence[int],
              model_peak_labels: Optional[Sequence[str]] = None) -> list[str]:
    """What the measured timeline shows, device by device, and where it differs from the
    prediction (its peak) and from the schedule model (the op it peaks in)."""
    out = []
    for d, dev in enumerate(evs):
        top = peak_event(dev)
        where = (f"inside {top.label} ({NAMES[top.kind]}) of iteration {top.iteration + 1}"
                 if top.kind != "-" else
                 f"between ops in iteration {top.iteration + 1} (receives, sends, the loss)")
        diff = (top.peak - predicted[d]) / predicted[d] if predicted[d] else 0.0
        text = (f"device {d}: measured peak {_mib(top.peak)} {where}, "
                f"{_mib(top.peak - top.before)} above what it held when that began; "
                f"predicted {_mib(predicted[d])} ({100 * diff:+.1f}%)")
        if model_peak_labels is not None and model_peak_labels[d]:
            mine = top.label if top.kind in ("F", "B") else None
            if mine == model_peak_labels[d]:
                text += f"; the schedule model peaks in {model_peak_labels[d]} too"
            else:
                text += f"; the schedule model puts its peak in {model_peak_labels[d]}"
        out.append(text + ".")
    return out


def model_peak_labels(timeline) -> list[str]:
    """Per device, the op (``F3``, ``B0``) in which the schedule model (a
    ``mcap.core.timeline.Timeline``) reaches that device's peak; "" where none runs then."""
    out = []
    for d, step in enumerate(timeline.peak_steps):
        ops = [o for o in timeline.ops if o.device == d and o.start <= step < o.end]
        out.append(f"{ops[0].kind}{ops[0].microbatch}" if ops else "")
    return out


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


__all__ = ["Event", "NAMES", "events", "model_peak_labels", "peak_event", "sentences"]
