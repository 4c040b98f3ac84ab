"""Orchestration of the long commands: ``profile`` (mCAP 3.1, incremental profiling) and
``sweep`` (paper 4.2, every partitioning or a seeded sample measured).

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
from typing import Optional, Sequence, TextIO

from mcap.core.errors import McapError
from mcap.workflow import reuse as reuse_mod
from mcap.workflow.progress import ProgressBar
from mcap.store import Store
from mcap.core.types import ModelInfo, Profile, Run, Setup, Sweep
from mcap.workflow.measuring import (  # noqa: F401  (DEFAULT_TIMEOUT, Tally: re-exported)
    DEFAULT_TIMEOUT, Measurer, Tally, check_stages, job_status, model_info,
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


@dataclass(frozen=True)
class SweepResult:
    sweep: Sweep
    sweep_id: int
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
    from mcap.core.profiling.schedule import profiling_plan
    from mcap.io import jsonio

    r, started = request, time.monotonic()
    real = model_info(r.spec)
    info = real if r.groups is None else merging.merged_model(real, r.groups)
    check_stages(info, r.setup)
    if r.parallel:  # refused before any run, naming the values
        from mcap.workflow.capture.parallel import check_parallel
        check_parallel(r.parallel, r.setup)
    plan = profiling_plan(info.num_layers, r.setup.stages, r.scheme).runs
    bar = ProgressBar(len(plan), "profile", stream=r.stream)
    m = Measurer(real.spec, real, r.setup, store, "profile", bar, r.job, r.timeout)

    def get(balance):
        if r.groups is None:
            return m.get(balance)
        run = m.get(merging.expand(balance, r.groups))
        return dataclasses.replace(run, balance=tuple(balance))
    if r.reuse:
        m.knowledge = reuse_mod.stored_knowledge(store, m.study, r.setup, m.machine)[0]
    made = None
    with job_status(store, r.job, m.study, bar.total), contextlib.closing(m):
        runs, fallback = _measure_plan(info, r.setup, plan, get, bar)
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


def _measure_plan(info: ModelInfo, setup: Setup, plan, get, bar) -> tuple[dict, list]:
    """The profiling runs, measured in rounds: each round measures what is queued, then
    asks the core for partitionings that give the statistics the oom/failed runs did not
    (the paper chose these by hand, 3.5). No balance is repeated, so the rounds end; a
    fallback round in which nothing ran ok ends them too (every oom run costs a restart of
    the stage processes, and a capacity nothing fits under would otherwise try them all).
    (runs by balance, the balances the fallback added)."""
    from mcap.core.profiling.stats import over_capacity_windows

    runs: dict[tuple[int, ...], Run] = {}
    fallback: list[tuple[int, ...]] = []
    known_over: frozenset = frozenset()
    queue = [tuple(b) for b in plan]
    for round_ in range(4 * info.num_layers + 1):
        for balance in queue:
            runs[balance] = get(balance)
        # A round that ran nothing ok but named new windows over the capacity still
        # narrows the search (mcap.core.profiling.stats.over_capacity_windows).
        proven = over_capacity_windows(runs.values())
        if round_ and not any(runs[b].status == "ok" for b in queue) and proven <= known_over:
            break
        known_over = proven
        queue = _fallback(info.num_layers, setup.stages, tuple(runs.values()))
        if not queue:
            break
        fallback.extend(queue)
        bar.grow(len(queue))
    return runs, fallback


def _statistics(info: ModelInfo, setup: Setup, runs: dict, get, fallback: list, bar):
    """The per-layer statistics of the runs, or ``MissingStatistics``: then, when the
    windows over the capacity leave few partitionings, all of them are measured first and
    the message names the best (``_measure_space``)."""
    from mcap.core.profiling.stats import extract

    try:
        stats = extract(tuple(runs.values()), info.num_layers)
    except McapError as exc:
        space = _measure_space(info.num_layers, setup.stages, runs, get, fallback, bar)
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


# The most partitionings without a stage over the capacity that profiling measures outright
# when the statistics stay incomplete (MissingStatistics.space).
SPACE_LIMIT = 16


def _measure_space(L: int, G: int, runs: dict, get, fallback: list, bar) -> tuple[Run, ...]:
    """When the oom runs leave at most SPACE_LIMIT partitionings with no stage holding a
    window proven over the capacity, measure the ones not yet measured (each new oom may
    shrink the space further) and return the runs of the whole space; () otherwise. Under
    such a capacity the statistics cannot be completed, but every partitioning that can
    train has then been measured under it."""
    from mcap.core.profiling import safefill
    from mcap.core.profiling.stats import over_capacity_windows
    for _ in range(SPACE_LIMIT + 1):
        over = over_capacity_windows(runs.values())
        if not over:
            return ()
        space = safefill.feasible(L, G, over, SPACE_LIMIT)
        if not space:
            return ()
        todo = [b for b in space if b not in runs]
        if not todo:
            return tuple(runs[b] for b in space)
        bar.grow(len(todo))
        for b in todo:
            runs[b] = get(b)
            fallback.append(b)
    return ()


def _fallback(num_layers: int, stages: int, runs: Sequence[Run]) -> list[tuple[int, ...]]:
    """Balances that would give the statistics the oom/failed runs left missing: the
    core's ``replan`` first, then a greedy search when replan has no answer."""
    from mcap.core.profiling.replanning import replan
    bad = [r for r in runs if r.status != "ok"]
    if not bad:
        return []
    ok = [r for r in runs if r.status == "ok"]
    seen = {r.balance for r in runs}
    try:
        extra = [tuple(b) for b in replan(num_layers, stages, ok, bad, list(seen))]
    except McapError:
        extra = []
    extra = [b for b in extra if b not in seen]
    return extra or greedy_fallback(num_layers, stages, runs)


# Candidates the greedy fallback scores at most; larger spaces are sampled (seeded).
GREEDY_CANDIDATES = 4000


def greedy_fallback(num_layers: int, stages: int, runs: Sequence[Run]) -> list[tuple[int, ...]]:
    """Partitionings, not tried before, that complete the statistics with the fewest runs.

    A backstop for ``replan``, which packs all needed windows into a fixed run shape and
    gives up when that shape has failed (e.g. mCAP's first run (1, 1, L-2) oom on its
    last stage: layer 1 can only be alone in that very run, but its mem_isolated can be
    derived from a window 1..z, mcap.core.profiling.stats). Greedy set cover over candidate balances:
    each pick removes at least one missing statistic; it keeps every stage no longer than
    the longest window that ran ok where it can, then removes the most, then puts as few
    layers as possible in windows of oom or failed runs that no ok run confirmed (one of
    those ran out of memory; a failed run records no per-stage peaks, so which one is
    unknown), then is the most even split. A pick that fails again adds its windows to
    the suspects next round."""
    from mcap.core import partition
    from mcap.core.profiling.stats import doomed, missing_for_windows, over_capacity_windows, stage_windows

    L, G = num_layers, stages
    have = {w for r in runs if r.status == "ok" for w in stage_windows(r.balance)}
    over = over_capacity_windows(runs)
    # An oom run that names the stage that ran out clears its other stages of suspicion.
    suspect = {w for r in runs if r.status != "ok" for w in stage_windows(r.balance)
               if not over.intersection(stage_windows(r.balance)) or w in over} - have
    longest = max((z - a + 1 for a, z in have), default=-(-L // G))
    tried = {tuple(r.balance) for r in runs}

    def missing_count(windows) -> int:
        m = missing_for_windows(L, windows, G, over=over)
        return len(m.isolated) + len(m.added)

    if partition.count(L, G) <= GREEDY_CANDIDATES:
        pool = sweep_balances(L, G, None, 0)
    else:
        pool = partition.random_partitionings(L, G, GREEDY_CANDIDATES, seed=0)
    # A balance with a stage holding a window proven over the capacity cannot fit.
    pool = [b for b in pool if b not in tried
            and not any(doomed(w, over) for w in stage_windows(b))]
    chosen: list[tuple[int, ...]] = []
    left = missing_count(have)
    # Stages no longer than ``longest`` first: the riskier rest is scored only when no
    # safe candidate helps (same order as scoring all, far fewer scored).
    tiers = [[b for b in pool if max(b) <= longest], [b for b in pool if max(b) > longest]]
    while left:
        scored = []
        for tier in tiers:
            for b in tier:
                wins = stage_windows(b)
                after = missing_count(have | set(wins))
                if after < left:
                    risky = sum(z - a + 1 for a, z in wins if (a, z) in suspect)
                    scored.append((after, risky, max(b), b))
            if scored:
                break
        if not scored:
            break
        after, _, _, best = min(scored)
        chosen.append(best)
        have |= set(stage_windows(best))
        for tier in tiers:
            if best in tier:
                tier.remove(best)
        left = after
    return chosen


def _missing_message(info: ModelInfo, runs: Sequence[Run], why: str) -> str:
    from mcap.core.profiling.stats import missing_statistics
    from mcap.core.profiling.stats import over_capacity_windows
    missing = missing_statistics(info.num_layers, [r for r in runs if r.status == "ok"],
                                 over_capacity_windows(runs))
    bad = [r for r in runs if r.status != "ok"]
    detail = missing.describe() if missing else why
    names = sorted(set(missing.isolated) | set(missing.added)) if missing else []
    named = ", ".join(f"{i} ({info.layers[i].name})" for i in names[:12])
    more = f" and {len(names) - 12} more" if len(names) > 12 else ""
    ooms = ", ".join("(" + ",".join(map(str, r.balance)) + f") {r.status}" for r in bad[:6])
    # A mem_added(l) whose pair l-1..l itself ran out of memory cannot be measured under
    # this capacity: no stage holding both layers fits (say so: it is the user's answer).
    from mcap.core.profiling.stats import doomed
    over = over_capacity_windows(runs)
    unfit = [l for l in (missing.added if missing else ()) if doomed((l - 1, l), over)]
    why_not = ("; layers " + ", ".join(f"{l - 1} and {l}" for l in unfit[:6])
               + " ran out of memory together on one stage, so no stage holding both fits "
               "under this capacity and their mem_added cannot be measured under it"
               if unfit else "")
    return (f"profiling {info.spec} is incomplete: still missing {detail}"
            + (f"; layers {named}{more}" if named else "") + why_not
            + f". {len(bad)} run(s) did not finish ok ({ooms}{', ...' if len(bad) > 6 else ''}); "
            f"the {len(runs)} runs so far are kept in the store")


# --- sweep -----------------------------------------------------------------------------

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
    info = model_info(spec)
    check_stages(info, setup)
    if balances is None:
        balances = sweep_balances(info.num_layers, setup.stages, sample, seed)
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
            runs = tuple(m.get(b) for b in balances)
        bar.close()
        if any(r.times is not None and r.samples_per_second is None for r in runs):
            runs = tuple(m.estimate(r) for r in runs)  # composed from stages run alone
        from mcap.workflow.estimate import KEY, estimate
        est = estimate(info, setup, runs, stream=stream) \
            if any(r.composed and r.samples_per_second is None for r in runs) else None
        result = Sweep(model=info, setup=setup, runs=runs, machine=m.machine,
                       extra={KEY: est} if est else None)
        if out is not None:
            jsonio.save(result, out)
        sweep_id = store.save_sweep(result, name=name)
    tally = Tally(m.measured, m.reused, time.monotonic() - started, runs, composed=composed,
                  cover=len(cover) if reuse else 0, alone=bool(reuse and alone))
    return SweepResult(result, sweep_id, tally)


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
