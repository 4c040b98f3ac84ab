"""Orchestration of the long commands: ``profile`` (mCAP 3.1, incremental profiling) here,
its fallback after out-of-memory runs in ``fallback.py``, and ``sweep`` (paper 4.2, every
partitioning or a seeded sample measured) in ``sweeping.py``.

plan -> measure -> record -> fall back -> extract -> write JSON. Every run goes into the
store the moment it finishes, and every run is first looked up there (``find_run``), so
a command that was interrupted (Ctrl-C, kill, a cancelled dashboard job) continues where
it stopped when it is run again: nothing finished is repeated or lost.

The stage processes are only started when something has to be measured, so re-running a
finished profile just re-extracts and re-writes it.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, TextIO

from mcap.core.errors import McapError
from mcap.workflow import reuse as reuse_mod
from mcap.workflow.progress import ProgressBar
from mcap.store import Store
from mcap.core.types import ModelInfo, Profile, Run, Setup
from mcap.workflow.fallback import (  # noqa: F401  (SPACE_LIMIT, greedy_fallback: re-exported)
    SPACE_LIMIT, _fallback, _measure_space, _missing_message, greedy_fallback,
)
from mcap.core.schedules.predict import is_multi as multi_schedule, split_backward
from mcap.workflow.measuring import (  # noqa: F401  (DEFAULT_TIMEOUT, Tally: re-exported)
    DEFAULT_TIMEOUT, Measurer, Tally, check_stages, job_status, model_info, view_outputs,
    with_out_bytes,
)
from mcap.workflow.sweeping import (  # noqa: F401  (re-exported: profiling.sweep as before)
    MAX_SWEEP_ALL, SweepResult, sweep, sweep_balances,
)

class MissingStatistics(McapError):
    """Profiling ended with layers whose statistics could not be measured (all oom/failed).

    ``space``: when the windows proven over the capacity leave only a few partitionings
    that can train, all of them measured (``_measure_space``); () otherwise."""

    def __init__(self, message: str, space: tuple = ()):
        super().__init__(message)
        self.space = tuple(space)


@dataclass(frozen=True)
class ProfileResult:
    profile: Profile
    profile_id: int
    tally: Tally


# --- profile ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ProfileRequest:
    """What ``profile`` is asked for: the model ``spec`` under ``setup`` (mCAP 3.1), written
    to ``out`` (None: only stored, under ``name``) with ``scheme``'s profiling plan, a
    dashboard ``job``'s progress, ``timeout`` seconds per run and a progress ``stream``.

    ``reuse``: a profiling run none of whose stage windows is new (every stage key already
    measured in this study, e.g. by a sweep, ``mcap.core.profiling.cover``) is composed
    from those runs instead of measured. The three systems' switches:

    - ``press`` (MPress): also measure MPress's statistics (``Profile.press``,
      ``mcap.workflow.press``).
    - ``groups`` (CAPTURE's layer merger, III-A3, ``mcap.core.capture.merging``): original
      layers per merged layer; the plan, the fallback and the statistics are over the merged
      layers, each run is measured as the partitioning of the real layers it stands for.
    - ``parallel`` (CAPTURE's dp, tp, III-A1): also profile 2- and 4-way data- /
      tensor-parallel stages into ``Profile.variants`` (``mcap.workflow.capture.parallel``),
      at ``setup.batch_size`` and over the merged layers when ``groups`` is given."""
    spec: str
    setup: Setup
    out: Optional[Path] = None
    scheme: str = "mcap"
    job: Optional[int] = None
    stream: Optional[TextIO] = field(default=None, compare=False)
    timeout: float = DEFAULT_TIMEOUT
    name: Optional[str] = None
    reuse: bool = True
    press: bool = False
    groups: Optional[tuple[int, ...]] = None
    parallel: tuple[str, ...] = ()


def profile(request: ProfileRequest, *, store: Store) -> ProfileResult:
    """Profile as ``request`` says, resuming from the store, falling back to other
    partitionings when a profiling run is oom, and write ``mcap.profile/1``.

    Raises ``MissingStatistics`` naming the layers when no partitioning that would yield
    their statistics fits; every run measured until then stays in the store."""
    from mcap.core.capture import merging
    from mcap.io import jsonio

    r, started = request, time.monotonic()
    real, info, plan = _model_and_plan(r)
    bar = ProgressBar(len(plan), "profile", stream=r.stream)
    m = Measurer(real.spec, real, r.setup, store, "profile", bar, r.job, r.timeout)

    def get_many(balances):  # every run of a round at once where the executor fans out
        if r.groups is None:
            return m.get_many(balances)
        runs = m.get_many([merging.expand(b, r.groups) for b in balances])
        return [dataclasses.replace(run, balance=tuple(b)) for b, run in zip(balances, runs)]

    def get(balance):
        return get_many([balance])[0]
    if r.reuse:
        m.knowledge = reuse_mod.stored_knowledge(store, m.study, r.setup, m.machine)[0]
    made = None
    with job_status(store, r.job, m.study, bar.total), contextlib.closing(m):
        runs, fallback = _measure_plan(info, r.setup, plan, get_many, bar)
        if multi_schedule(r.setup):
            stats = _multi_statistics(info, r.setup, runs, bar)
        else:
            stats = _statistics(info, r.setup, runs, get, fallback, bar)
        used = tuple(runs.values())
        prof = _profile_record(r, real, info, stats, used, m.machine)
        if r.press:  # MPress costs (mcap.workflow.press), measured after the runs
            from mcap.workflow.press import with_press
            prof = with_press(r.spec, prof)
        if r.parallel:
            from mcap.workflow.capture.parallel import add_parallel_variants
            m.close()  # the pipeline stage processes make way for the hybrid ones
            prof, made = add_parallel_variants(prof, r.spec, store, r.parallel, r.scheme,
                                               timeout=r.timeout, stream=r.stream)
        if r.out is not None:
            jsonio.save(prof, r.out)
        profile_id = store.save_profile(prof, name=r.name)
    tally = Tally(m.measured, m.reused, time.monotonic() - started, used, tuple(fallback),
                  composed=m.composed)
    if made is not None:  # the dp/tp runs are counted too (the summary says how many of each)
        tally = tally.with_parallel(made)
    return ProfileResult(prof, profile_id, tally)


def _model_and_plan(r: ProfileRequest) -> tuple[ModelInfo, ModelInfo, list]:
    """The model's layers (with each one's output bytes), the layers profiled (merged where
    ``r.groups`` says), and mCAP's profiling plan over the pipeline's stages: G of them, or
    G x V chunks under a multi-stage schedule (every chunk's op bytes are read as a stage's
    peak is), the split plan under a split backward. Refuses bad input before any run."""
    from mcap.core.capture import merging
    from mcap.core.profiling.schedule import profiling_plan
    real = model_info(r.spec, r.setup)
    if r.groups is None:  # each layer's output bytes, kept with the study's layers
        real = with_out_bytes(real, r.setup)
    info = real if r.groups is None else merging.merged_model(real, r.groups)
    check_stages(info, r.setup)
    if r.parallel:  # refused before any run, naming the values
        from mcap.workflow.capture.parallel import check_parallel
        check_parallel(r.parallel, r.setup)
    plan = profiling_plan(info.num_layers, r.setup.num_chunks, r.scheme).runs
    if multi_schedule(r.setup) and split_backward(r.setup):
        plan = _split_plan(r, info)
    return real, info, plan


def _measure_plan(info: ModelInfo, setup: Setup, plan, get_many, bar) -> tuple[dict, list]:
    """The profiling runs, measured in rounds: each round measures what is queued, then
    asks the core for partitionings that give the statistics the oom/failed runs did not
    (the paper chose these by hand, 3.5); ``get_many`` measures a round at once where the
    executor can (issue 42). No balance is repeated, so the rounds end; a
    fallback round in which nothing ran ok ends them too (every oom run costs a restart of
    the stage processes, and a capacity nothing fits under would otherwise try them all).
    (runs by balance, the balances the fallback added)."""
    from mcap.core.profiling.stats import over_capacity_windows

    runs: dict[tuple[int, ...], Run] = {}
    fallback: list[tuple[int, ...]] = []
    known_over: frozenset = frozenset()
    queue = [tuple(b) for b in plan]
    for round_ in range(4 * info.num_layers + 1):
        for balance, run in zip(queue, get_many(queue)):  # a round's runs go out together
            runs[balance] = run
        # A round that ran nothing ok but named new windows over the capacity still
        # narrows the search (mcap.core.profiling.stats.over_capacity_windows).
        proven = over_capacity_windows(runs.values())
        if round_ and not any(runs[b].status == "ok" for b in queue) and proven <= known_over:
            break
        known_over = proven
        queue = _fallback(info.num_layers, setup.num_chunks, tuple(runs.values()))
        if not queue:
            break
        fallback.extend(queue)
        bar.grow(len(queue))
    return runs, fallback


def _split_plan(r: ProfileRequest, info: ModelInfo) -> list:
    """A split-backward schedule's plan (``mcap.core.schedules.memory.split_plan``), over
    the layers with each one whose output is a view glued to the next (no chunk may end
    there: ``view_outputs``)."""
    from mcap.core.capture import merging
    from mcap.core.profiling.schedule import profiling_plan
    from mcap.core.schedules.memory import split_plan
    sizes = merging.glue(info.num_layers, view_outputs(r.spec, r.setup))
    L, n = len(sizes), r.setup.num_chunks
    first = [merging.expand(b, sizes) for b in profiling_plan(L, n, r.scheme).runs]
    inner = [merging.expand((1, *b), sizes)[1:] for b in profiling_plan(L - 1, n - 1,
                                                                        r.scheme).runs] \
        if sizes[0] == 1 else []
    return split_plan(first, inner)


def _multi_statistics(info: ModelInfo, setup: Setup, runs: dict, bar):
    """A multi-stage schedule's profile: the per-layer statistics of its op model
    (``mcap.core.schedules.predict.stats_of``), fitted on the runs' rank timelines; the
    runs themselves are what predictions are made from."""
    from mcap.core.schedules.predict import event_model, stats_of
    from mcap.core.types import LayerStats
    from mcap.runner.orders import generate
    bar.close()
    ok = tuple(r for r in runs.values() if r.status == "ok")
    draft = Profile(model=info, setup=setup, stats=LayerStats((1,) * info.num_layers,
                                                              (None,) + (0,) * (info.num_layers - 1)),
                    runs=ok)
    return stats_of(event_model([draft], generate))


def _statistics(info: ModelInfo, setup: Setup, runs: dict, get, fallback: list, bar):
    """The per-layer statistics of the runs, or ``MissingStatistics``: then, when the
    windows over the capacity leave few partitionings, all of them are measured first and
    the message names the best (``_measure_space``)."""
    from mcap.core.profiling.stats import extract

    try:
        stats = extract(tuple(runs.values()), info.num_layers)
    except McapError as exc:
        space = _measure_space(info.num_layers, setup.num_chunks, runs, get, fallback, bar)
        bar.close()
        message = _missing_message(info, tuple(runs.values()), str(exc))
        ok = [r for r in space if r.status == "ok"]
        if ok:  # every partitioning that can train was measured: say which fits best
            best = min(ok, key=lambda r: sorted(r.peaks, reverse=True))
            message += (f". Only {len(space)} partitioning(s) have no stage over the capacity; "
                        f"all were measured, the best is ({','.join(map(str, best.balance))}) "
                        f"at {max(best.peaks):,} bytes")
        raise MissingStatistics(message, space) from None
    bar.close()
    return stats


def _profile_record(r: ProfileRequest, real: ModelInfo, info: ModelInfo, stats,
                    used: tuple, machine) -> Profile:
    """The Profile of the runs: over the merged layers with ``r.groups`` (their sizes in
    its extra), and which mem_added are capacity bounds, not measurements."""
    from mcap.core.capture import merging
    from mcap.core.profiling.stats import bounded_added, over_capacity_windows

    extra = {} if r.groups is None else \
        {merging.EXTRA_KEY: {"sizes": list(r.groups), "layers": real.num_layers}}
    bounded = bounded_added(used, info.num_layers)
    if bounded:
        extra[OVER_KEY] = {"bounded_added": list(bounded),
                           "windows": [list(w) for w in sorted(over_capacity_windows(used))]}
    return Profile(model=info, setup=r.setup, stats=stats, runs=used, machine=machine,
                   extra=extra or None)


# Profile.extra key listing the mem_added that are over-capacity lower bounds (mcap.core.profiling.stats).
OVER_KEY = "over_capacity"


def summary(kind: str, tally: Tally, out: Optional[Path], stored_id: int) -> str:
    """The command's last line. With dp/tp runs (``profile --parallel``) they are counted
    with the rest, each count saying how many of it they were."""
    runs = tally.runs + tally.parallel_runs
    ok = sum(r.status == "ok" for r in runs)
    oom = sum(r.status == "oom" for r in runs)
    failed = len(runs) - ok - oom
    where = f" -> {out}" if out else ""
    extra = f", {len(tally.fallback)} fallback" if tally.fallback else ""
    unit = "stages run alone" if tally.alone else "covering runs"
    composed = (f", {tally.composed} composed from measured stages"
                f"{f' ({tally.cover} {unit})' if tally.cover else ''}"
                if tally.composed else "")
    parallel = len(tally.parallel_runs)
    measured = f" (of them {tally.parallel_measured} dp/tp)" if tally.parallel_measured else ""
    reused = f" (of them {tally.parallel_reused} dp/tp)" if tally.parallel_reused else ""
    return (f"{kind}: {len(runs)} runs ({f'of them {parallel} dp/tp; ' if parallel else ''}"
            f"{ok} ok, {oom} oom, {failed} failed{extra}); "
            f"{tally.measured} {'stages ' if tally.alone else ''}measured now{measured}, "
            f"{tally.reused} reused from the "
            f"store{reused}{composed}; "
            f"{tally.seconds:.1f} s{where} (store {kind} id {stored_id})")
