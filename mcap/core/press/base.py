"""The MPress planner registry (ARCHITECTURE.md, "Add an MPress planner"). Pure.

A planner turns one partitioning's memory/time model (``model.Problem``) and a capacity into
one action per layer (keep, recompute, swap, d2d); :func:`solve` makes the ``PressPlan``
every caller sees. One class per planner, one file each, registered once::

    @register
    class MPress(Planner):
        name, label, help, color = "mpress", "MPress (III-D)", "...", "#4c78a8"
        def plan(self, p, capacity): ...

The CLI's ``press --method`` / ``recommend --press-method`` choices and the pages'
planner selectors read :func:`names` / :func:`get`.
"""
from __future__ import annotations

from typing import ClassVar

from mcap.core.errors import McapError
from mcap.core.press.model import to_plan
from mcap.core.press.problems import Problem
from mcap.core.press.actions import LayerAction, PressPlan
from mcap.core.registry import Registry


class Planner:
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    color: ClassVar[str] = "#7f7f7f"  # its colour on every chart

    def plan(self, p: Problem, capacity: int) -> list[LayerAction]:
        """One action per layer (every stage's, in layer order) that fits ``capacity``;
        McapError (``model.unreachable``) when none does."""
        raise NotImplementedError


REGISTRY: Registry[Planner] = Registry("press method")
register, names, get = REGISTRY.register, REGISTRY.names, REGISTRY.get


def solve(p: Problem, capacity: int, method: str = "mpress") -> PressPlan:
    """The plan of ``method`` for problem ``p`` under ``capacity`` (McapError naming the
    smallest capacity that can be met when none fits)."""
    planner = get(method)
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity <= 0:
        raise McapError(f"capacity must be a positive number of bytes, got {capacity!r}")
    return to_plan(p, planner.plan(p, capacity), method, capacity)
