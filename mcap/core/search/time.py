"""``time``: torchgpipe's ``balance_by_time`` (the paper's throughput baseline, 4.3).

It times each layer of the real model on a sample micro-batch, so it needs torch and a
model the caller allows mcap to build. The core never builds one: the caller passes a
``timer`` in the :class:`SearchContext` (``mcap.runner.timebalance.timer``); without one the
method says why it cannot run."""
from __future__ import annotations

from mcap.core.errors import McapError
from mcap.core.search.base import Found, Method, register


class NoDevice(McapError):
    """The profile's device is not on this machine: ``time`` is left out, not run elsewhere."""


def no_device_note(device: str) -> str:
    """Why ``time`` cannot run for a profile measured on ``device`` on a machine without
    one: timing the model on another device would give that device's times, a different
    machine's balance, so it is left out (issue 30)."""
    kind = str(device).split(":")[0]
    name = "CUDA" if kind == "cuda" else kind
    return (f"the profile was measured on {kind}; this machine has no {name} device, so "
            f"torchgpipe's balance_by_time cannot time it here (timing it on the CPU would "
            f"give another machine's times)")


@register
class Time(Method):
    name = "time"
    label = "balanced by time"
    help = ("baseline: torchgpipe's balance_by_time, equal forward+backward time per stage, "
            "timed on the real model (needs torch and a model mcap may build)")
    uses_costs = False
    color = "#d62728"
    needs_model = True
    reference = True

    def search(self, costs, stages, context, *, band=None, progress=None, **options):
        if context.timer is None or context.spec is None:
            raise McapError("method 'time' times the real model: it needs torch, torchgpipe and "
                            "a model spec mcap may build, and none was given here")
        balance = tuple(int(n) for n in context.timer(context.spec, stages, context.micro_batch))
        if sum(balance) != costs.num_layers:  # the file's spec builds another model
            raise McapError(f"the profile is inconsistent: its model spec {context.spec[:200]!r} "
                            f"builds {sum(balance)} layers but its layer list has "
                            f"{costs.num_layers}; it cannot be timed")
        return Found(balance, 1)
