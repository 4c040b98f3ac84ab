"""``params``: min-max over each stage's parameter bytes (a baseline), like DeepSpeed's
``partition_method="parameters"``, solved exactly by the same DP and tie-break as ``exact``
with the per-layer cost being its parameter bytes (an additive cost: mem_isolated =
mem_added = param_bytes)."""
from __future__ import annotations

from typing import Callable, Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.predict import table_from_arrays
from mcap.core.search import exact
from mcap.core.search.base import Found, Method, register


def params(layer_params: Optional[Sequence[int]], L: int, G: int,
           progress: Optional[Callable[[int, int], None]] = None) -> tuple[tuple[int, ...], int]:
    if layer_params is None:
        raise McapError("method 'params' needs each layer's parameter bytes (the profile's model.layers)")
    if len(layer_params) != L:
        raise McapError(f"method 'params' got parameter bytes for {len(layer_params)} layers "
                        f"but the statistics have {L}")
    bad = [i for i, p in enumerate(layer_params) if isinstance(p, bool) or not isinstance(p, int) or p < 0]
    if bad:
        raise McapError(f"parameter bytes must be integers >= 0; layers {bad[:10]} are not")
    table = table_from_arrays(list(layer_params), list(layer_params))
    return exact.solve(table, G, progress=progress)


@register
class Params(Method):
    name = "params"
    label = "balanced by parameters"
    help = "baseline: min-max of each stage's parameter bytes (DeepSpeed's 'parameters')"
    uses_costs = False
    color = "#ff7f0e"

    def search(self, costs, stages, context, *, band=None, progress=None, **options):
        balance, work = params(context.layer_params, costs.num_layers, stages, progress)
        return Found(balance, work)
