"""MPress's planner (MPress II-III): what to do with each layer's saved activations so every
device fits its capacity at the least added time. Pure (no torch, no files).

    from mcap.core import press
    plan = press.plan_profile(profile, (3, 3, 5, 19), capacity, method="mpress")  # PressPlan
    best = press.joint(profile, 4, capacity)           # partitioning + plan, fastest that fits

``model.py`` is the memory/time model (read its docstring first; ``problems.py`` builds its
``Problem`` record, ``timing.py`` times the schedule), ``base.py`` the planner
registry, ``mpress.py`` the approximated search of III-D, ``milp.py`` the exact MILP beside it, ``jointsearch.py`` the joint
partition + plan search.
"""
from __future__ import annotations

from typing import Optional, Sequence

from mcap.core.press import mpress, milp  # noqa: F401  (registration, in this order)
from mcap.core.press.base import Planner, get, names, register, solve  # noqa: F401
from mcap.core.press.model import (  # noqa: F401  (the public names)
    Outcome, outcome, smallest_capacity, to_plan, unreachable,
)
from mcap.core.press.problems import (  # noqa: F401  (the public names)
    PressNumbers, Problem, build, problem, problem_from,
)
from mcap.core.press.actions import PressPlan

def plan_profile(profile, balance: Sequence[int], capacity: int, method: str = "mpress",
                 predictor: Optional[str] = None) -> PressPlan:
    return solve(problem(profile, balance, capacity, predictor), capacity, method)


def joint(profile, stages: int, capacity: int, method: str = "milp",
          predictor: Optional[str] = None, top: int = 4):
    """Partitioning + plan, the fastest that fits (``jointsearch.py``)."""
    from mcap.core.press.jointsearch import joint as run
    return run(profile, stages, capacity, method, predictor, top)
