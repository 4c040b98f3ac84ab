"""CAPTURE's layer merger applied to profiles and partitionings (III-A3). Pure.

``mcap.core.capture.plan.merge_layers`` chooses the groups (always the adjacent pair whose merged
M_i is lowest, until ``Lm`` remain) and gives the merged statistics. This module makes a
*merged profile* of them: its model is the merged layers (each named ``first..last`` of the
original layers it holds, with their parameter bytes summed; its spec is the real spec plus
`` merged 2,1,...``), its statistics and runs are
over the merged layers, and ``extra["merged"]`` keeps the group sizes so that every balance
over merged layers maps back to a balance over the model's real layers (:func:`expand`),
which is what the user measures and is shown.
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.capture.plan import HybridPlan, check_plan, merge_layers
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Run, VariantStats

EXTRA_KEY = "merged"


def sizes_of(profile: Profile) -> Optional[tuple[int, ...]]:
    """The original layers per merged layer of a merged profile, or None (not merged)."""
    entry = (profile.extra or {}).get(EXTRA_KEY)
    if not isinstance(entry, dict):
        return None
    sizes = entry.get("sizes")
    if not isinstance(sizes, list) or len(sizes) != profile.model.num_layers \
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 1 for s in sizes):
        raise McapError(f"the profile's extra.merged.sizes {sizes!r} is not one positive layer "
                        f"count per merged layer ({profile.model.num_layers})")
    return tuple(sizes)


def real_layers(profile: Profile) -> int:
    """The model's real layer count: what balances and plans are written in."""
    sizes = sizes_of(profile)
    return profile.model.num_layers if sizes is None else sum(sizes)


def real_spec(profile: Profile) -> str:
    """The spec of the model the profile's layers belong to (a merged profile's spec names
    its groups, :func:`merged_spec`, and builds nothing): what ``measure`` is given."""
    sizes = sizes_of(profile)
    suffix = "" if sizes is None else merged_spec("", sizes)
    spec = profile.model.spec
    return spec[:-len(suffix)] if suffix and spec.endswith(suffix) else spec


def merged_model(info: ModelInfo, sizes: Sequence[int]) -> ModelInfo:
    """The merged layers as a model: names ``first..last``, parameter bytes summed."""
    if sum(sizes) != info.num_layers:
        raise McapError(f"merged layer sizes sum to {sum(sizes)} but the model has "
                        f"{info.num_layers} layers")
    layers, at = [], 0
    for n in sizes:
        group = info.layers[at:at + n]
        name = group[0].name if n == 1 else f"{group[0].name}..{group[-1].name}"
        kinds = {l.kind for l in group if l.kind}
        layers.append(Layer(name, sum(l.param_bytes for l in group),
                            kind=kinds.pop() if len(kinds) == 1 else ("merged" if kinds else "")))
        at += n
    return ModelInfo(merged_spec(info.spec, sizes), tuple(layers))


def merged_spec(spec: str, sizes: Sequence[int]) -> str:
    """The merged model's name: the real spec plus the group sizes. Another model than the
    real one (the store keeps a merged profile in its own study, its runs linked in the real
    model's study where they were recorded, ``Store.save_profile``; nothing builds it: a
    command that would run it is refused by the spec parser rather than measuring the wrong
    layers)."""
    return f"{spec} merged {','.join(map(str, sizes))}"


def glue(num_layers: int, no_end: Sequence[int]) -> tuple[int, ...]:
    """The sizes of units over ``num_layers`` layers in which a layer no chunk may end at
    (``no_end``: under zero bubble, one whose output is a view) is glued to the next one:
    a partitioning of the units, :func:`expand`-ed, never ends a chunk there."""
    glued, sizes, l = set(no_end), [], 0
    while l < num_layers:
        n = 1
        while l + n - 1 in glued and l + n < num_layers:
            n += 1
        sizes.append(n)
        l += n
    return tuple(sizes)


def expand(balance: Sequence[int], sizes: Sequence[int]) -> tuple[int, ...]:
    """A balance over merged layers -> the same partitioning over the original layers."""
    if sum(balance) != len(sizes):
        raise InvalidPartitioning(f"balance {','.join(map(str, balance))} places "
                                  f"{sum(balance)} merged layers but there are {len(sizes)}")
    out, at = [], 0
    for n in balance:
        out.append(sum(sizes[at:at + n]))
        at += n
    return tuple(out)


def contract(balance: Sequence[int], sizes: Sequence[int],
             name: Optional[str] = None) -> tuple[int, ...]:
    """A balance over original layers -> over merged layers; refused naming the stage
    boundary that falls inside a merged layer (``name``: how errors call it)."""
    total = sum(sizes)
    name = name or f"balance {','.join(map(str, balance))}"
    if sum(balance) != total:
        raise InvalidPartitioning(f"{name} places {sum(balance)} layers but the model has "
                                  f"{total}")
    ends, at = {}, 0
    for i, n in enumerate(sizes):
        at += n
        ends[at] = i + 1
    out, cut, prev = [], 0, 0
    for n in balance:
        cut += n
        if cut not in ends:
            raise InvalidPartitioning(
                f"{name}: the stage boundary after layer "
                f"{cut - 1} falls inside a merged layer of this profile (merged sizes "
                f"{','.join(map(str, sizes))}); boundaries must fall between merged layers")
        out.append(ends[cut] - prev)
        prev = ends[cut]
    return tuple(out)


def expand_plan(plan: HybridPlan, sizes: Sequence[int]) -> HybridPlan:
    """A hybrid plan over merged layers -> the same plan over the original layers (each
    stage keeps its parallelism and degree): :func:`expand` of its balance."""
    return HybridPlan(tuple(dataclasses.replace(s, layers=n)
                            for s, n in zip(plan.stages, expand(plan.balance, sizes))))


def contract_plan(plan: HybridPlan, sizes: Sequence[int]) -> HybridPlan:
    """A hybrid plan over original layers -> over merged layers (:func:`contract`)."""
    check_plan(plan, sum(sizes))
    return HybridPlan(tuple(dataclasses.replace(s, layers=n) for s, n in
                            zip(plan.stages, contract(plan.balance, sizes, f"plan {plan.text}"))))


def merged_window(first: int, last: int, sizes: Sequence[int]) -> tuple[int, int]:
    """Original layers first..last -> the merged layers holding exactly them; refused
    naming the boundary that falls inside a merged layer."""
    starts, at = {}, 0
    for i, n in enumerate(sizes):
        starts[at] = i
        at += n
    ends = {s + n - 1: i for s, i, n in ((s, i, sizes[i]) for s, i in starts.items())}
    if first not in starts or last not in ends or first > last:
        raise InvalidPartitioning(
            f"layers {first}..{last} do not start and end at merged layers of this profile "
            f"(merged sizes {','.join(map(str, sizes))})")
    return starts[first], ends[last]


def contract_run(run: Run, sizes: Sequence[int]) -> Optional[Run]:
    """The run as a run over merged layers, or None when a boundary splits a merged layer."""
    try:
        return dataclasses.replace(run, balance=contract(run.balance, sizes))
    except McapError:
        return None


def _merge_stats(stats: LayerStats, sizes: Sequence[int]) -> LayerStats:
    """III-A3's formulas for fixed groups: M_i(group) = M_i(first) + sum M_a(rest),
    M_a(group) = sum M_a(members) (None for the first group)."""
    iso, added, at = [], [], 0
    for g, n in enumerate(sizes):
        members = range(at, at + n)
        iso.append(stats.mem_isolated[at] + sum(stats.mem_added[k] for k in members if k > at))
        added.append(None if g == 0 else sum(stats.mem_added[k] for k in members))
        at += n
    return LayerStats(tuple(iso), tuple(added))


def merge_sizes(stats: LayerStats, target: int) -> tuple[int, ...]:
    """The merger's groups for these statistics (``hybrid.merge_layers``)."""
    return merge_layers(stats.mem_isolated, stats.mem_added, target)[0]


def merge_profile(profile: Profile, sizes: Sequence[int]) -> Profile:
    """``profile`` over the merged layers of ``sizes`` (module docstring): statistics by
    III-A3's formulas, every pp variant merged the same way, and no runs: the runs of the
    real layers do not give the merged statistics (most stage boundaries fall inside a
    merged layer), so only Listing 1.1 (predictor ``paper``) predicts from this profile;
    ``profile --merge-to`` profiles the merged layers for the predictors that fit runs."""
    sizes = tuple(int(s) for s in sizes)
    variants = tuple(VariantStats(v.batch_size, _merge_stats(v.stats, sizes), v.parallel,
                                  v.degree) for v in profile.variants if v.parallel == "pp")
    extra = dict(profile.extra or {})
    extra[EXTRA_KEY] = {"sizes": list(sizes), "layers": sum(sizes)}
    return dataclasses.replace(profile, model=merged_model(profile.model, sizes),
                               stats=_merge_stats(profile.stats, sizes), runs=(),
                               variants=variants, extra=extra, press=None)
