"""The search-method registry (ARCHITECTURE.md, "Add a search method"). Pure.

Every method has one signature and one result: given the stage costs of a fitted predictor
(``mcap.core.costs.StageCosts``) and a stage count, :meth:`Method.search` returns a
:class:`Found` (balance, how many candidates it evaluated, bo's best-so-far curve).
``mcap.core.recommend.recommend`` wraps it in the one ``Recommendation`` every caller sees.
One class per method, one file each, registered once::

    @register
    class Exact(Method):
        name, label, help = "exact", "mCAP (exact)", "..."
        def search(self, costs, stages, context, *, band=None, progress=None, **options): ...

The CLI's ``--method`` choices, the dashboard's selectors, the evaluation and scaling all
read :func:`names` / :func:`get`.

**A method that takes an argument** (DeepSpeed's ``type:REGEX``, torchtitan's
``titan:FIRST,LAST``) says so with ``argument`` (its metavar) and turns the text after the
colon into search options in :meth:`Method.parse_argument`. A *choice* is a name or
``name:ARGUMENT``; :func:`choose` reads one (the CLI's ``--method type:Block``, the one
entry ``recommend(..., method="type:Block")``) and every caller that lists methods lists
names, which run with the argument's default.
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
    (``params``), each layer's kind (its class name: ``type``, ``titan``, ``megatron``),
    the model spec and micro-batch size (``time``), and a ``timer``."""
    layer_params: Optional[tuple[int, ...]] = None
    layer_kinds: Optional[tuple[str, ...]] = None
    spec: Optional[str] = None
    micro_batch: int = 1
    timer: Optional[Timer] = field(default=None, compare=False)


@dataclass(frozen=True)
class Found:
    balance: tuple[int, ...]
    evaluated: int
    curve: tuple[int, ...] = ()


class Method:
    """Base class. Capabilities are flags, read by the CLI, the pages and the workflows
    (never the method's name):

    - ``on_demand``: slow (minutes), so pages run it only when asked, in the background
      (bo); it takes ``seed`` / ``iterations`` and reports its best so far to ``on_best``.
    - ``draws_curve``: its ``Found.curve`` (best so far per evaluation) is worth a chart.
    - ``needs_model``: it times the real model (``context.timer``, torch, the profile's
      device on this machine): never run as a page renders, left out where it cannot run.
    - ``reference``: the baseline scaling compares mCAP with (paper 4.3, torchgpipe's
      ``balance_by_time``).
    - ``enumerates``: it predicts every partitioning one by one (a page bounds it).
    - ``uses_costs``: the pick depends on the predicted costs (False for the baselines,
      whose pick is the same under every predictor; ``scale --partitioner`` offers them).
    - ``tolerance``: honours ``tie_tolerance``.
    - ``partial``: its rule exists only for some layer and stage counts (Megatron-LM asserts
      that the stages divide the blocks): elsewhere it raises McapError saying why, and a
      caller comparing methods reports that in place of a pick.
    - ``argument``: the metavar of the argument it takes after ``name:`` (e.g. ``REGEX``;
      "" for none); :meth:`parse_argument` turns it into search options.
    - ``color``: its colour on every chart."""
    name: ClassVar[str] = ""
    # What a room reads on every chart and table ("mCAP (exact)", "even split"); the name
    # stays in tooltips, exports and the command line (issue 40, item 12).
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    color: ClassVar[str] = "#1f77b4"
    defaults: ClassVar[dict] = {}
    on_demand: ClassVar[bool] = False
    draws_curve: ClassVar[bool] = False
    needs_model: ClassVar[bool] = False
    reference: ClassVar[bool] = False
    enumerates: ClassVar[bool] = False
    uses_costs: ClassVar[bool] = True
    tolerance: ClassVar[bool] = False
    partial: ClassVar[bool] = False
    argument: ClassVar[str] = ""

    def parse_argument(self, text: str) -> dict:
        """The search options ``name:text`` stands for; McapError naming the text when it
        is not one (only called on methods with an ``argument``)."""
        raise NotImplementedError

    def search(self, costs: StageCosts, stages: int, context: SearchContext, *,
               band=None, progress: Progress = None, **options) -> Found:
        raise NotImplementedError


REGISTRY: Registry[Method] = Registry("method")
register, get = REGISTRY.register, REGISTRY.get


DEFAULT = "exact"  # the method every caller uses unless told otherwise


def names(on_demand: Optional[bool] = None, **flags: bool) -> tuple[str, ...]:
    """Registered method names, optionally only those whose capability flags have the
    given values, e.g. ``names(on_demand=False, needs_model=False)``."""
    if on_demand is not None:
        flags["on_demand"] = on_demand
    for flag in flags:
        if not hasattr(Method, flag):
            raise McapError(f"search methods have no capability {flag!r}")
    return tuple(m.name for m in REGISTRY
                 if all(getattr(m, flag) == value for flag, value in flags.items()))


def choose(choice: str) -> tuple[Method, dict]:
    """A method choice, ``name`` or ``name:ARGUMENT``, as (method, the options its argument
    stands for); McapError naming the choices for an unknown name, and the method's
    argument for one that takes none or a bad one."""
    name, colon, text = str(choice).partition(":")
    method = get(name)
    if not colon:
        return method, {}
    if not method.argument:
        raise McapError(f"method {name!r} takes no argument (got {str(choice)!r}); methods "
                        f"that take one: {', '.join(describe(m) for m in REGISTRY if m.argument) or 'none'}")
    return method, method.parse_argument(text)


def describe(method: Method) -> str:
    """How a method is written on the command line: ``name`` or ``name[:ARGUMENT]``."""
    return method.name + (f"[:{method.argument}]" if method.argument else "")


def reference() -> str:
    """The baseline scaling compares mCAP with (the method flagged ``reference``)."""
    return next(m.name for m in REGISTRY if m.reference)


def check_options(method: Method, options: dict, allowed: Sequence[str]) -> None:
    bad = sorted(set(options) - set(allowed))
    if bad:
        raise McapError(f"method {method.name} takes no option {', '.join(bad)}; it takes "
                        f"{', '.join(allowed) or 'none'}")
