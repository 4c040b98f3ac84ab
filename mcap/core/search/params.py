"""``params``: DeepSpeed's ``partition_method="parameters"`` (its default), a baseline.

DeepSpeed's ``PipelineModule._partition_layers`` (deepspeed/runtime/pipe/module.py) counts
each layer's trainable parameters (``_count_layer_params``) and hands them to
``ds_utils.partition_balanced(weights, num_parts)`` (deepspeed/runtime/utils.py; the rule
since v0.12.5, PR #4312 "partition_balanced return wrong result", read at
microsoft/DeepSpeed 38327e0, 2025-02-21). That function is a dynamic programme over
``(i items, j parts)`` that keeps, per state, the split whose heaviest and lightest part
differ least (``cost = max_sum - min_sum``), extending the kept split of ``(k, j - 1)`` by
the part ``k..i-1`` for every ``k`` in ascending order and taking a candidate when its
spread is ``<=`` the best so far, so the last ``k`` wins a tie. It balances the *spread*,
not the heaviest part (the rule before v0.12.5 binary-searched the heaviest part): on
``[1, 9, 5, 3]`` over 3 parts it returns loads 10 | 5 | 3, not 1 | 9 | 8. With fewer layers
than parts it falls back to ``partition_uniform``.

:func:`partition_balanced` implements that rule (vectorised over ``k``, with integer
weights, so ties are exact as DeepSpeed's float sums of integer counts are) and returns
DeepSpeed's ``parts`` (stage boundaries); :func:`balance_of` turns them into layer counts.
DeepSpeed counts elements, mCAP's profile records bytes: the same split when every
parameter has one dtype (scaling all weights by 4 scales every spread by 4). A tied weight
counts in every layer that holds it, as DeepSpeed builds a ``TiedLayerSpec`` in each.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.search.base import Found, Method, register
from mcap.core.search.uniform import uniform

_INF = np.iinfo(np.int64).max // 4


def partition_balanced(weights: Sequence[int], parts: int) -> list[int]:
    """DeepSpeed's ``partition_balanced`` (module docstring): ``parts + 1`` boundaries, the
    first 0 and the last ``len(weights)``."""
    n, m = len(weights), int(parts)
    if n <= m:  # DeepSpeed: partition_uniform(n, m), one layer to each of the first n parts
        return [min(p, n) for p in range(m + 1)]
    prefix = np.zeros(n + 1, dtype=np.int64)
    prefix[1:] = np.cumsum(np.asarray(weights, dtype=np.int64))
    # best[j][k]: (max, min, spread) of the split kept for k items in j parts; _INF when none
    hi = np.full((m + 1, n + 1), _INF, dtype=np.int64)
    lo = np.full((m + 1, n + 1), _INF, dtype=np.int64)
    hi[0, 0] = 0  # DeepSpeed's dp_max[0, 0] = 0; its dp_min[0, 0] stays inf
    spread = np.full((m + 1, n + 1), _INF, dtype=np.int64)
    spread[0, 0] = 0
    back = np.zeros((m + 1, n + 1), dtype=np.int64)
    for j in range(1, m + 1):
        for i in range(j, n + 1):
            k = np.arange(i)
            part = prefix[i] - prefix[k]
            top = np.maximum(hi[j - 1, k], part)
            bottom = np.minimum(lo[j - 1, k], part)
            cost = np.where(top >= _INF, _INF, top - bottom)  # inf - x stays inf
            best = cost.min()
            pick = int(np.flatnonzero(cost == best)[-1])  # "<=": the last k of the least spread
            spread[j, i], hi[j, i], lo[j, i], back[j, i] = best, top[pick], bottom[pick], pick
    bounds = [n]
    for j in range(m, 0, -1):
        bounds.append(int(back[j, bounds[-1]]))
    return bounds[::-1]


def balance_of(bounds: Sequence[int]) -> tuple[int, ...]:
    """DeepSpeed's ``parts`` boundaries -> layer counts per stage."""
    return tuple(int(b - a) for a, b in zip(bounds[:-1], bounds[1:]))


def check_params(layer_params: Optional[Sequence[int]], L: int, who: str = "params") -> list[int]:
    if layer_params is None:
        raise McapError(f"method {who!r} needs each layer's parameter bytes (the profile's model.layers)")
    if len(layer_params) != L:
        raise McapError(f"method {who!r} got parameter bytes for {len(layer_params)} layers "
                        f"but the statistics have {L}")
    bad = [i for i, p in enumerate(layer_params) if isinstance(p, bool) or not isinstance(p, int) or p < 0]
    if bad:
        raise McapError(f"parameter bytes must be integers >= 0; layers {bad[:10]} are not")
    return list(layer_params)


def params(layer_params: Optional[Sequence[int]], L: int, G: int) -> tuple[tuple[int, ...], int]:
    """DeepSpeed's "parameters" split of ``L`` layers over ``G`` stages, and the DP's work."""
    weights = check_params(layer_params, L)
    if G >= L:
        return uniform(L, G), 1
    return balance_of(partition_balanced(weights, G)), G * L


@register
class Params(Method):
    name = "params"
    label = "balanced by parameters"
    help = ("baseline: DeepSpeed's default partition_method 'parameters': the split whose "
            "stages' parameter counts differ least (its partition_balanced)")
    uses_costs = False
    color = "#ff7f0e"

    def search(self, costs, stages, context, *, band=None, progress=None, **options):
        balance, work = params(context.layer_params, costs.num_layers, stages)
        return Found(balance, work)
