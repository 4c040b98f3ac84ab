"""The ``sweep`` command's work (paper 4.2): every partitioning or a seeded sample measured,
or composed from the stages and covering runs a store already holds
(``mcap.workflow.reuse``), and written as ``mcap.sweep/1``."""
from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, TextIO

from mcap.core.errors import McapError
from mcap.core.types import Setup, Sweep
from mcap.store import Store
from mcap.workflow import reuse as reuse_mod
from mcap.workflow.measuring import (
    DEFAULT_TIMEOUT, Measurer, Tally, check_stages, job_status, model_info,
)
from mcap.workflow.progress import ProgressBar


@dataclass(frozen=True)
class SweepResult:
    sweep: Sweep
    sweep_id: int
    tally: Tally



MAX_SWEEP_ALL = 10**6  # partitionings a sweep without --sample may list (and measure)


def sweep_balances(num_layers: int, stages: int, sample: Optional[int],
                   seed: int) -> list[tuple[int, ...]]:
    """Every partitioning (in enumeration order), or ``sample`` of them drawn with ``seed``."""
    from mcap.core import partition
    if sample is None:
        count = partition.count(num_layers, stages)
        if count > MAX_SWEEP_ALL:  # refused before listing (it would not fit in memory)
            raise McapError(f"a sweep of all partitionings of {num_layers} layers on {stages} "
                            f"stages would measure {count:,} of them (limit {MAX_SWEEP_ALL:,}); "
                            f"use --sample N")
        return [tuple(int(n) for n in row)
                for chunk in partition.enumerate_all(num_layers, stages) for row in chunk]
    if sample < 1:
        raise McapError(f"--sample must be >= 1, got {sample}")
    count = partition.count(num_layers, stages)
    if min(sample, count) > MAX_SWEEP_ALL:  # refused before drawing (issue 28)
        raise McapError(f"--sample {sample:,} would measure {min(sample, count):,} of the "
                        f"{count:,} partitionings of {num_layers} layers on {stages} stages; a "
                        f"sweep measures at most {MAX_SWEEP_ALL:,}")
    return partition.random_partitionings(num_layers, stages, sample, seed=seed)


def runnable_balances(info, setup: Setup, sample: Optional[int], seed: int,
                      stream: Optional[TextIO] = None) -> list[tuple[int, ...]]:
    """:func:`sweep_balances`, but under a schedule that splits the backward only the
    partitionings torch can run: no chunk ends at a layer whose output is a view (VGG11's
    ``flatten``; torch's ``stage_backward_input`` cannot detach it, and such a run only
    fails). The partitionings left out are counted on ``stream``."""
    from mcap.core import partition
    from mcap.core.capture import merging
    from mcap.core.schedules.predict import split_backward
    from mcap.workflow.measuring import view_outputs
    L, n = info.num_layers, setup.num_chunks
    views = view_outputs(info.spec, setup) if split_backward(setup) else ()
    sizes = merging.glue(L, views)
    if len(sizes) == L:
        return sweep_balances(L, n, sample, seed)
    if len(sizes) < n:
        raise McapError(f"{n} chunks cannot be cut from {L} layers under {setup.schedule} "
                        f"without ending one at layer {', '.join(map(str, views))} (a view)")
    left = partition.count(L, n) - partition.count(len(sizes), n)
    print(f"sweep: {left:,} of the {partition.count(L, n):,} partitionings left out: under "
          f"{setup.schedule} no chunk may end at layer {', '.join(str(v) for v in views)} "
          "(its output is a view, which torch's zero-bubble backward cannot detach)",
          file=stream or sys.stderr)
    return [merging.expand(b, sizes) for b in sweep_balances(len(sizes), n, sample, seed)]


def sweep(spec: str, setup: Setup, out: Optional[Path], *, store: Store,
          sample: Optional[int] = None, seed: int = 0, job: Optional[int] = None,
          stream: Optional[TextIO] = None, timeout: float = DEFAULT_TIMEOUT,
          name: Optional[str] = None,
          balances: Optional[Sequence[Sequence[int]]] = None, reuse: bool = True) -> SweepResult:
    """Measure every partitioning (or a seeded sample, or the given ``balances``) and
    write ``mcap.sweep/1``.

    With ``reuse`` (the default) only a covering set of them is measured and the others'
    per-stage peaks are composed from it (``mcap.workflow.reuse``; their runs say
    ``composed`` and have no throughput); ``reuse=False`` measures every one.
    oom and failed runs are records too (the sweep goes on); a failed run is retried when
    the sweep is run again, an ok or oom one is reused."""
    from mcap.io import jsonio
    from mcap.core.partition import validate

    started = time.monotonic()
    info = model_info(spec, setup)
    check_stages(info, setup)
    if balances is None:
        balances = runnable_balances(info, setup, sample, seed, stream)
    else:
        balances = [validate(b, info.num_layers).balance for b in balances]
    balances = [tuple(int(n) for n in b) for b in balances]
    bar = ProgressBar(0 if reuse else len(balances), "sweep", stream=stream)
    m = Measurer(info.spec, info, setup, store, "sweep", bar, job, timeout)
    alone = reuse_mod.stages_alone(setup)
    if reuse:  # what this machine's stored runs already tell, and what is left to measure
        know, latest = reuse_mod.stored_knowledge(store, m.study, setup, m.machine)
        if alone:  # each distinct stage once, alone (issue 25, item 5)
            cover = reuse_mod.plan_stages(know, latest, balances, setup.schedule)
        else:
            cover = reuse_mod.plan_cover(know, latest, balances, setup.schedule)
        bar.grow(len(cover))
    composed = 0
    with job_status(store, job, m.study, bar.total), contextlib.closing(m):
        if reuse:
            found = (reuse_mod.sweep_stages if alone else reuse_mod.sweep_reusing)(
                m, know, latest, cover, balances)
            runs, composed = found.runs, found.composed
            m.reused += found.reused
        else:
            runs = tuple(m.get_many(balances))
        bar.close()
        if any(r.times is not None and r.samples_per_second is None for r in runs):
            runs = tuple(m.estimate(r) for r in runs)  # composed from stages run alone
        result = Sweep(model=info, setup=setup, runs=runs, machine=m.machine,
                       extra=_estimates(info, setup, runs, m, stream))
        if out is not None:
            jsonio.save(result, out)
        sweep_id = store.save_sweep(result, name=name)
    tally = Tally(m.measured, m.reused, time.monotonic() - started, runs, composed=composed,
                  cover=len(cover) if reuse else 0, alone=bool(reuse and alone))
    return SweepResult(result, sweep_id, tally)


def _estimates(info, setup, runs, m, stream) -> Optional[dict]:
    """The sweep's keys on its estimated throughputs: composed runs without one get the
    per-layer model's (``mcap.workflow.estimate``); runs estimated from their stages' times
    name the link that was done over (``mcap.core.stagetime.KEY``, for the reader:
    pages/space.py). None when there is neither."""
    from mcap.workflow.estimate import KEY, estimate
    est = estimate(info, setup, runs, stream=stream) \
        if any(r.composed and r.samples_per_second is None for r in runs) else None
    extra = {KEY: est} if est else {}
    link = m.estimate_link()
    if link is not None and any(r.estimated for r in runs):
        from mcap.core import stagetime
        extra[stagetime.KEY] = stagetime.link_to_json(link)
    return extra or None
