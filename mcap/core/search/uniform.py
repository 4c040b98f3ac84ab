"""``uniform``: layer counts as even as possible (a baseline; the statistics are not read).

The L mod G extra layers go to the first stages: DeepSpeed's ``partition_method="uniform"``
exactly (``ds_utils.partition_uniform``, deepspeed/runtime/utils.py at microsoft/DeepSpeed
38327e0: boundaries at multiples of ``L // G``, each of the first ``L % G`` stages one layer
more), so it is registered once, under this name."""
from __future__ import annotations

from mcap.core.search.base import Found, Method, register


def uniform(L: int, G: int) -> tuple[int, ...]:
    q, r = divmod(L, G)
    return tuple([q + 1] * r + [q] * (G - r))


@register
class Uniform(Method):
    name = "uniform"
    label = "even split"
    help = "baseline: layer counts as even as possible, the first stages take the extra layers"
    uses_costs = False
    color = "#7f7f7f"

    def search(self, costs, stages, context, *, band=None, progress=None, **options):
        return Found(uniform(costs.num_layers, stages), 1)
