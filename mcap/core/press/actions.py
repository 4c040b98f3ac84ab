"""An MPress plan (MPress II-III): for each stage of a partitioning, what happens to each
layer's activations saved for backward. Pure; the JSON form is ``mcap.press/1``.

Actions (per layer, per stage):

* ``keep``: saved activations stay in the stage's memory until backward (mCAP's default);
* ``recompute``: the layer's saved activations are dropped and its forward is re-run in
  backward (``torch.utils.checkpoint``), costing its forward time per micro-batch;
* ``swap``: they are moved to host memory after forward and back before backward;
* ``d2d``: they are moved into the memory of a peer stage with spare memory (``target``,
  a stage index other than the layer's own) and back before backward.

The file::

    {"schema": "mcap.press/1", "model": "vgg11:image_size=32", "balance": [3, 3, 5, 19],
     "capacity_bytes": int, "method": "mpress" | "milp",
     "plan": [[{"layer": 0, "action": "keep"}, {"layer": 1, "action": "d2d", "target": 3},
               ...], ...],                  # one list per stage, its layers in order
     "predicted_peaks": [int, ...],         # per stage, after the plan
     "predicted_added_seconds": float,      # per training iteration, wall clock
     "predicted_work_seconds": float}       # per iteration, the plan's work summed over
                                            # stages (the planners' objective; optional)

Reading checks every value (a plan file is data) and raises McapError naming it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from mcap.core.errors import McapError

PRESS_SCHEMA = "mcap.press/1"
ACTIONS = ("keep", "recompute", "swap", "d2d")


@dataclass(frozen=True)
class LayerAction:
    layer: int            # global layer index
    action: str = "keep"  # one of ACTIONS
    target: Optional[int] = None  # d2d only: the stage whose memory holds the activations


@dataclass(frozen=True)
class PressPlan:
    model: str
    balance: tuple[int, ...]
    stages: tuple[tuple[LayerAction, ...], ...]  # per stage, its layers in order
    capacity_bytes: Optional[int] = None
    method: str = "mpress"
    predicted_peaks: tuple[int, ...] = ()
    predicted_added_seconds: float = 0.0  # wall clock per iteration (the schedule's delay)
    predicted_work_seconds: Optional[float] = None  # summed over stages (the objective)

    def action(self, layer: int) -> LayerAction:
        for stage in self.stages:
            for a in stage:
                if a.layer == layer:
                    return a
        raise McapError(f"layer {layer} is not in the plan of balance "
                        f"{','.join(map(str, self.balance))}")

    def counts(self) -> dict[str, int]:
        out = {a: 0 for a in ACTIONS}
        for stage in self.stages:
            for a in stage:
                out[a.action] += 1
        return out


def plan_to_json(plan: PressPlan) -> dict:
    return {"schema": PRESS_SCHEMA, "model": plan.model, "balance": list(plan.balance),
            "capacity_bytes": plan.capacity_bytes, "method": plan.method,
            "plan": [[{"layer": a.layer, "action": a.action,
                       **({"target": a.target} if a.action == "d2d" else {})} for a in stage]
                     for stage in plan.stages],
            "predicted_peaks": [int(p) for p in plan.predicted_peaks],
            "predicted_added_seconds": float(plan.predicted_added_seconds),
            **({"predicted_work_seconds": float(plan.predicted_work_seconds)}
               if plan.predicted_work_seconds is not None else {})}


def _fail(where: str, msg: str) -> McapError:
    return McapError(f"press plan: {where}: {msg}")


def _int(v, where, low=0, high=2**50) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
        raise _fail(where, f"expected an integer in [{low:,}, {high:,}], found {v!r:.40}")
    return v


def plan_from_json(d: Any) -> PressPlan:
    """A validated PressPlan; the layers of stage i must be exactly that stage's window."""
    if not isinstance(d, dict):
        raise _fail("top level", f"expected an object, found {type(d).__name__}")
    if d.get("schema") != PRESS_SCHEMA:
        raise _fail("schema", f"expected {PRESS_SCHEMA!r}, found {d.get('schema')!r:.40}")
    model = d.get("model")
    if not isinstance(model, str):
        raise _fail("model", f"expected a model spec string, found {model!r:.40}")
    bal = d.get("balance")
    if not isinstance(bal, list) or not bal:
        raise _fail("balance", "expected a non-empty list of layer counts")
    balance = tuple(_int(b, f"balance[{i}]", 1, 2**31) for i, b in enumerate(bal))
    cap = d.get("capacity_bytes")
    cap = None if cap is None else _int(cap, "capacity_bytes", 1)
    method = d.get("method", "mpress")
    if not isinstance(method, str) or len(method) > 40:
        raise _fail("method", f"expected a short name, found {method!r:.40}")
    plan = d.get("plan")
    if not isinstance(plan, list) or len(plan) != len(balance):
        raise _fail("plan", f"expected one list per stage ({len(balance)}), found "
                            f"{len(plan) if isinstance(plan, list) else type(plan).__name__}")
    stages, first = [], 0
    for s, items in enumerate(plan):
        if not isinstance(items, list) or len(items) != balance[s]:
            raise _fail(f"plan[{s}]", f"expected {balance[s]} layer entries (balance), found "
                                      f"{len(items) if isinstance(items, list) else items!r:.40}")
        acts = []
        for j, x in enumerate(items):
            w = f"plan[{s}][{j}]"
            if not isinstance(x, dict):
                raise _fail(w, f"expected an object, found {x!r:.40}")
            layer = _int(x.get("layer"), f"{w}.layer", 0, 2**31)
            if layer != first + j:
                raise _fail(f"{w}.layer", f"stage {s} holds layers {first}..{first + balance[s] - 1}"
                                          f"; entry {j} must be layer {first + j}, found {layer}")
            action = x.get("action")
            if action not in ACTIONS:
                raise _fail(f"{w}.action", f"expected one of {', '.join(ACTIONS)}, found "
                                           f"{action!r:.40}")
            target = None
            if action == "d2d":
                target = _int(x.get("target"), f"{w}.target", 0, len(balance) - 1)
                if target == s:
                    raise _fail(f"{w}.target", f"d2d moves activations to another stage; "
                                               f"target {target} is the layer's own stage")
            acts.append(LayerAction(layer, action, target))
        stages.append(tuple(acts))
        first += balance[s]
    peaks = d.get("predicted_peaks", [])
    if not isinstance(peaks, list) or (peaks and len(peaks) != len(balance)):
        raise _fail("predicted_peaks", f"expected {len(balance)} peaks (one per stage)")
    added = _seconds(d.get("predicted_added_seconds", 0.0), "predicted_added_seconds")
    work = d.get("predicted_work_seconds")  # absent in older files
    work = None if work is None else _seconds(work, "predicted_work_seconds")
    return PressPlan(model, balance, tuple(stages), cap, method,
                     tuple(_int(p, f"predicted_peaks[{i}]") for i, p in enumerate(peaks)),
                     added, work)


def _seconds(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) \
            or not 0 <= v <= 1e9:
        raise _fail(where, f"expected seconds >= 0, found {v!r:.40}")
    return float(v)


def keep_all(model: str, balance: tuple[int, ...]) -> PressPlan:
    """The plan that changes nothing (every layer ``keep``)."""
    stages, first = [], 0
    for n in balance:
        stages.append(tuple(LayerAction(first + j) for j in range(n)))
        first += n
    return PressPlan(model, tuple(balance), tuple(stages))
