"""The search-method registry (ARCHITECTURE.md, "Add a search method"). Pure.

Every method has one signature and one result: given the stage costs of a fitted predictor
(``mcap.core.costs.StageCosts``) and a stage count, :meth:`Method.search` returns a
:class:`Found` (balance, how many candidates it evaluated, bo's best-so-far curve).
``mcap.core.recommend.recommend`` wraps it in the one ``Recommendation`` every caller sees.
One class per method, one file each, registered once::

    @register
    class Exact(Method):
        name, label, help = "exact", "exact (min-max DP)", "..."
        def search(self, costs, stages, context, *, band=None, progress=None, **options): ...

The CLI's ``--method`` choices, the dashboard's selectors, the evaluation and scaling all
read :func:`names` / :func:`get`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, ClassVar, Optional, Sequence

from mcap.core.costs import StageCosts
from mcap.core.errors import McapError
from mcap.core.registry import Registry

Progress = Optional[Callable[[int, int], None]]
# (model spec, stages, micro-batch size) -> balance: a throughput-based split that needs
# the real model (torchgpipe's balance_by_time). The core never builds a model; whoever
# may run the model passes one in (``mcap.runner.timebalance.timer``).
Timer = Callable[[str, int, int], tuple]


@dataclass(frozen=True)
class SearchContext:
    """What some methods need besides the stage costs: each layer's parameter bytes
    (``params``), the model spec and micro-batch size (``time``), and a ``timer``."""
    layer_params: Optional[tuple[int, ...]] = None
    spec: Optional[str] = None
    micro_batch: int = 1
    timer: Optional[Timer] = field(default=None, compare=False)


@dataclass(frozen=True)
class Found:
    balance: tuple[int, ...]
    evaluated: int
    curve: tuple[int, ...] = ()


class Method:
    """Base class. ``on_demand``: slow (minutes), so pages run it only when asked (bo).
    ``uses_costs``: the pick depends on the predicted costs (False for the baselines, whose
    pick is the same under every predictor). ``tolerance``: honours ``tie_tolerance``."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    defaults: ClassVar[dict] = {}
    on_demand: ClassVar[bool] = False
    uses_costs: ClassVar[bool] = True
    tolerance: ClassVar[bool] = False

    def search(self, costs: StageCosts, stages: int, context: SearchContext, *,
               band=None, progress: Progress = None, **options) -> Found:
        raise NotImplementedError


REGISTRY: Registry[Method] = Registry("method")
register, get = REGISTRY.register, REGISTRY.get


def names(on_demand: Optional[bool] = None) -> tuple[str, ...]:
    """Registered method names, optionally only the (not) on-demand ones."""
    return tuple(m.name for m in REGISTRY if on_demand is None or m.on_demand == on_demand)


def check_options(method: Method, options: dict, allowed: Sequence[str]) -> None:
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise McapError(f"method {method.name} takes no option {', '.join(bad)}; it takes "
                        f"{', '.join(allowed) or 'none'}")
