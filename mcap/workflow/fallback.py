"""When profiling runs run out of memory (mCAP 3.5: "if some configurations run out of
memory, a different set is chosen"): the balances that would still give the missing
statistics (:func:`_fallback`: the core's ``replan``, then :func:`greedy_fallback`), every
partitioning that can train when only a few are left (:func:`_measure_space`), and the
message naming what stays missing (:func:`_missing_message`)."""
from __future__ import annotations

from typing import Sequence

from mcap.core.errors import McapError
from mcap.core.types import ModelInfo, Run

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
    from mcap.core.profiling.stats import missing_for_windows, over_capacity_windows, stage_windows

    L, G = num_layers, stages
    have = {w for r in runs if r.status == "ok" for w in stage_windows(r.balance)}
    over = over_capacity_windows(runs)
    # An oom run that names the stage that ran out clears its other stages of suspicion.
    suspect = {w for r in runs if r.status != "ok" for w in stage_windows(r.balance)
               if not over.intersection(stage_windows(r.balance)) or w in over} - have
    longest = max((z - a + 1 for a, z in have), default=-(-L // G))

    def missing_count(windows) -> int:
        m = missing_for_windows(L, windows, G, over=over)
        return len(m.isolated) + len(m.added)

    pool = _candidates(L, G, {tuple(r.balance) for r in runs}, over)
    chosen: list[tuple[int, ...]] = []
    left = missing_count(have)
    # Stages no longer than ``longest`` first: the riskier rest is scored only when no
    # safe candidate helps (same order as scoring all, far fewer scored).
    tiers = [[b for b in pool if max(b) <= longest], [b for b in pool if max(b) > longest]]
    while left:
        scored = _scored(tiers, have, left, suspect, missing_count)
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


def _candidates(L: int, G: int, tried: set, over) -> list[tuple[int, ...]]:
    """The balances the greedy fallback scores: every partitioning, or a seeded sample of
    :data:`GREEDY_CANDIDATES`, less those tried and those with a stage holding a window
    proven over the capacity (they cannot fit)."""
    from mcap.core import partition
    from mcap.core.profiling.stats import doomed, stage_windows
    from mcap.workflow.sweeping import sweep_balances
    if partition.count(L, G) <= GREEDY_CANDIDATES:
        pool = sweep_balances(L, G, None, 0)
    else:
        pool = partition.random_partitionings(L, G, GREEDY_CANDIDATES, seed=0)
    return [b for b in pool if b not in tried
            and not any(doomed(w, over) for w in stage_windows(b))]


def _scored(tiers, have: set, left: int, suspect: set, missing_count) -> list:
    """(statistics still missing, layers in suspect windows, longest stage, balance) of
    every candidate of the first tier holding one that removes a missing statistic."""
    from mcap.core.profiling.stats import stage_windows
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
    return scored


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
