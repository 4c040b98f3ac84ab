"""Executor ``local``: this machine's pool of stage processes (``mcap.runner.pool``), the
default. Stages run alone take one slot each: one per GPU on CUDA (every GPU of the
machine measures a stage at once), one per ``Setup.threads`` cores on the CPU
(``mcap.runner.isolation.stage_slots``); stages that run together get one process each."""
from __future__ import annotations

from mcap.runner.executors.base import Executor, register


@register
class Local(Executor):
    name = "local"
    label = "local (this machine's stage processes)"
    help = ("this machine's pool of stage processes: one stage at a time per GPU, or per "
            "--threads cores on the CPU")

    def pool(self, spec, setup, settings, *, world, timeout, startup_timeout, group, alone):
        from mcap.runner.pool import WorkerPool
        return WorkerPool(spec, setup, world=world, timeout=timeout, group=group,
                          startup_timeout=startup_timeout, alone=alone)
