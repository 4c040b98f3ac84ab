"""``time``: torchgpipe's ``balance_by_time`` (the paper's throughput baseline, 4.3).

It times each layer of the real model on a sample micro-batch, so it needs torch and a
model the caller allows mcap to build. The core never builds one: the caller passes a
``timer`` in the :class:`SearchContext` (``mcap.runner.timebalance.timer``); without one the
method says why it cannot run."""
from __future__ import annotations

from mcap.core.errors import McapError
from mcap.core.search.base import Found, Method, register


@register
class Time(Method):
    name = "time"
    label = "time (torchgpipe balance_by_time)"
    help = ("baseline: torchgpipe's balance_by_time, equal forward+backward time per stage, "
            "timed on the real model (needs torch and a model mcap may build)")
    uses_costs = False

    def search(self, costs, stages, context, *, band=None, progress=None, **options):
        if context.timer is None or context.spec is None:
            raise McapError("method 'time' times the real model: it needs torch, torchgpipe and "
                            "a model spec mcap may build, and none was given here")
        balance = tuple(int(n) for n in context.timer(context.spec, stages, context.micro_batch))
        return Found(balance, 1)
