"""Stage-reuse sweeps: measure each distinct stage once, compose every partitioning.

Where stages run alone (the default, ``mcap.runner.alone``, issue 25) a sweep measures
each distinct stage key of the requested partitionings exactly once, in its own process
(:func:`plan_stages`, :func:`sweep_stages`), records each stage as it ends, and composes
every partitioning from the stage records (their throughput is estimated from the stages'
own times, ``mcap.core.stagetime``). A stage that runs out of memory alone is proven oom
at once. Where stages run together (``--isolation pipeline``, engines torchgpipe and
hybrid) the older form below applies (issue 13).

A stage's peak depends only on its stage key (``mcap.core.profiling.cover``), so a sweep measures
the few requested partitionings that together hold every key (greedy set cover) and
composes every other requested partitioning's per-stage peaks from them. What the store
already holds for the study (an interrupted sweep, an earlier ``--no-reuse`` sweep,
profiling runs) counts as known, so a resumed sweep measures only what is still unknown.

Where a stage is not known after the cover (its covering run failed, or ran out of memory
with more than one stage not known to fit), the partitionings that need it are measured
directly, one at a time, each answer feeding the rest: first those with no stage from an
oom or failed run (most unknown stages first: if they run ok they settle the most, and
knowing the other stages of an oom run proves which stage ran out, which makes every
partitioning holding it oom), then the others, fewest unknown stages first (an oom with
one unknown stage proves it). So a sweep with reuse never measures a partitioning that
was not requested, and never more of them than a sweep without reuse.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mcap.core.profiling.cover import Knowledge, greedy_cover, stage_keys
from mcap.core.types import Run, Setup
from mcap.store import Store


@dataclass(frozen=True)
class ReuseResult:
    runs: tuple[Run, ...]
    cover: int      # covering partitionings (stages run alone: stages) chosen at the start
    direct: int     # partitionings measured because a stage of theirs stayed unknown
    composed: int   # runs in the result that were composed, not measured
    reused: int     # measured runs found in the store for requested partitionings


def stored_knowledge(store: Store, study, setup: Setup, machine=None) -> tuple[Knowledge, dict]:
    """What the store's measured (not composed) runs and stages run alone of ``study`` on
    ``machine`` say about each stage key, and the latest finished (ok/oom) measured run of
    each balance (as find_run). Runs of other machines are left out: their peaks may
    differ (a stage's peak is exact only on the machine that measured it,
    mcap.core.machine; ``Machine.meter`` keeps stages read alone apart from stages read
    together where the two differ)."""
    know = Knowledge(setup.schedule, setup.num_chunks, setup.virtual_stages)
    latest: dict = {}
    key = None if machine is None else machine.key()
    for record in store.run_records(study):
        run = record.run
        if run.composed or record.machine != key:
            continue
        know.add(run)
        if run.status in ("ok", "oom"):
            latest[tuple(run.balance)] = run
    for stage in store.stage_runs(study, machine):
        know.add_stage(stage)
    return know, latest


def stages_alone(setup: Setup) -> bool:
    """Whether this process's runners of ``setup`` run stages alone (``--isolation``)."""
    from mcap.runner import engines
    from mcap.runner.isolation import resolve_isolation
    return resolve_isolation(None, engines.get(setup.engine)) == "stage"


def plan_stages(know: Knowledge, latest: dict, balances: Sequence[tuple[int, ...]],
                schedule: str) -> list[tuple[tuple[int, ...], int]]:
    """Stages run alone (issue 25, item 5): each stage key of ``balances`` not known yet,
    once, as ``(balance, stage index)`` of the first balance that holds it."""
    seen = set(know.known())
    jobs = []
    for b in balances:
        if b in latest or know.compose(b) is not None:
            continue
        for i, k in enumerate(stage_keys(b, schedule, know.virtual)):
            if k not in seen:
                seen.add(k)
                jobs.append((b, i))
    return jobs


def sweep_stages(m, know: Knowledge, latest: dict, jobs, balances) -> ReuseResult:
    """Measure each stage of ``jobs`` alone through the Measurer ``m`` (recorded as each
    ends), compose every balance from the stages, and measure whole (stages alone) the
    few whose stage failed, so their records say why."""
    for run in m.measure_stages(jobs):
        know.add_stage(run)
    measured: dict = {}
    pending = [b for b in dict.fromkeys(balances) if b not in latest
               and know.compose(b) is None]
    m.bar.grow(len(pending))
    for b in pending:
        run = m.get(b)
        measured[b] = run
        know.add(run)
    out, composed, reused = [], 0, 0
    for b in balances:
        if b in measured:
            out.append(measured[b])
        elif b in latest:
            out.append(latest[b])
            reused += 1
        else:
            out.append(know.compose(b))
            composed += 1
    return ReuseResult(tuple(out), len(jobs), len(pending), composed, reused)


def plan_cover(know: Knowledge, latest: dict, balances: Sequence[tuple[int, ...]],
               schedule: str) -> list[tuple[int, ...]]:
    """The covering partitionings still to measure for ``balances``."""
    todo = [b for b in balances if b not in latest and know.compose(b) is None]
    return greedy_cover(todo, schedule, known=know.known(), virtual=know.virtual)


def _next(know: Knowledge, pending: list) -> tuple[int, ...]:
    clean = [(len(know.unknown_keys(b)), -i, b) for i, b in enumerate(pending)
             if not know.suspect_keys(b)]
    if clean:
        return max(clean)[2]
    return min((len(know.unknown_keys(b)), i, b) for i, b in enumerate(pending))[2]


def sweep_reusing(m, know: Knowledge, latest: dict, cover: list[tuple[int, ...]],
                  balances: Sequence[tuple[int, ...]]) -> ReuseResult:
    """Measure ``cover`` through the Measurer ``m`` (store lookup, record, progress),
    then whatever stays unknown, and compose the rest of ``balances``."""
    measured: dict = {}

    def get(balance):
        run = m.get(balance)
        measured[balance] = run
        know.add(run)

    for b in cover:
        get(b)
    done = set(latest) | set(measured)
    pending = [b for b in dict.fromkeys(balances) if b not in done and know.compose(b) is None]
    direct = 0
    while pending:
        best = _next(know, pending)
        m.bar.grow(1)
        get(best)
        direct += 1
        pending = [b for b in pending if b not in measured and know.compose(b) is None]
    out, composed, reused = [], 0, 0
    for b in balances:
        if b in measured:
            out.append(measured[b])
        elif b in latest:
            out.append(latest[b])
            reused += 1
        else:
            run = know.compose(b)
            out.append(run)
            composed += 1
    return ReuseResult(tuple(out), len(cover), direct, composed, reused)
