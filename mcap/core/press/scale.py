"""The largest model that trains under a capacity with partitioning alone vs partitioning +
an MPress plan, from predictions (issue 16, 5; MPress IV's "largest sustainable model
size"). Pure: the workflow (``mcap.workflow.scaling.scale_press``) profiles each size.

At a size, partitioning alone trains when the lowest keep-all predicted peak over every
partitioning (mCAP's exact pick) fits the capacity; partitioning + plan trains when the
lowest *floor* (``jointsearch.floor_of``: the least any plan reaches) fits it, and then
``jointsearch.joint`` gives the fastest such pair and its added time.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from mcap.core.scaling import bisect


@dataclass(frozen=True)
class PressPoint:
    value: int
    spec: str
    params: int
    peak: int                    # lowest keep-all predicted peak (partitioning alone)
    floor: int                   # lowest peak any partitioning + plan reaches
    balance: Optional[tuple[int, ...]] = None  # the joint pick, when a plan fits
    added_seconds: Optional[float] = None


@dataclass(frozen=True)
class PressScaling:
    model: str
    vary: str
    capacity: int
    points: tuple[PressPoint, ...]
    largest_alone: Optional[int]
    largest_press: Optional[int]

    def _params(self, value) -> Optional[int]:
        return next((p.params for p in self.points if p.value == value), None)

    @property
    def ratio(self) -> Optional[float]:
        """Trainable parameters of the largest model with a plan over without one."""
        a, b = self._params(self.largest_alone), self._params(self.largest_press)
        return None if not a or b is None else b / a


def search(grid, point_at, capacity: int) -> tuple[Optional[int], Optional[int]]:
    """(largest value training alone, largest with a plan), bisecting the grid twice over
    the same points (``point_at`` is cached by the caller: each size is profiled once)."""
    alone, _ = bisect(tuple(grid), lambda v: point_at(v).peak <= capacity)
    press, _ = bisect(tuple(grid), lambda v: point_at(v).floor <= capacity)
    return alone, press


def to_dict(s: PressScaling) -> dict:
    return {"model": s.model, "vary": s.vary, "capacity_bytes": s.capacity,
            "largest_alone": s.largest_alone, "largest_press": s.largest_press,
            "params_alone": s._params(s.largest_alone), "params_press": s._params(s.largest_press),
            "ratio": s.ratio,
            "points": [{"value": p.value, "spec": p.spec, "params": p.params, "peak": p.peak,
                        "floor": p.floor, "balance": None if p.balance is None else list(p.balance),
                        "added_seconds": p.added_seconds} for p in sorted(s.points, key=lambda p: p.value)]}


def report(s: PressScaling) -> str:
    lines = [f"largest {s.model} under {s.capacity:,} bytes per device, varying {s.vary} "
             "(from predictions):"]
    for name, v in (("partitioning alone", s.largest_alone), ("partitioning + plan", s.largest_press)):
        n = s._params(v)
        lines.append(f"  {name:<20} {s.vary}={v if v is not None else '-'}"
                     + (f" ({n:,} parameters)" if n else ""))
    if s.ratio is not None:
        lines.append(f"  ratio {s.ratio:.2f}x trainable parameters")
    for p in sorted(s.points, key=lambda p: p.value):
        lines.append(f"  {s.vary}={p.value}: keep-all {p.peak:,} B, floor {p.floor:,} B"
                     + (f", joint {','.join(map(str, p.balance))} +{p.added_seconds:.4f} s"
                        if p.balance else ""))
    return "\n".join(lines)
