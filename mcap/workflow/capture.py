"""CAPTURE profiling (III-A2, III-A3): mCAP's profiling plan at two batch sizes, stored as
one profile whose target is the training batch size, optionally on merged layers.

    profile(spec, setup, sizes=(8, 16), store=...)            # target setup.batch_size
    profile(spec, setup, sizes=(8, 16), merge_to=12, store=...)

Each batch size is an ordinary ``mcap.workflow.profiling.profile`` (resumable, stored, with
the oom fallback) under the same setup but that batch size. The first (smallest) is
profiled on the model's layers; with ``merge_to`` the merger (``mcap.core.merging``) then
groups them from those statistics, and every later batch size is profiled on the merged
layers only (Lm - G + 1 runs instead of L - G + 1: what the merger saves). The result's
statistics at the target come from the batch line (``mcap.core.batchscale``) unless the
target is one of the profiled sizes.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Optional, Sequence, TextIO

from mcap.core import batchscale, merging
from mcap.core.errors import McapError
from mcap.core.types import Profile, Setup, VariantStats
from mcap.workflow import profiling
from mcap.workflow.profiling import DEFAULT_TIMEOUT, ProfileResult, Tally


def profile(spec: str, setup: Setup, out: Optional[Path], *, store, sizes: Sequence[int],
            merge_to: Optional[int] = None, scheme: str = "mcap", job: Optional[int] = None,
            stream: Optional[TextIO] = None, timeout: float = DEFAULT_TIMEOUT,
            name: Optional[str] = None, reuse: bool = True) -> ProfileResult:
    """The CAPTURE profile of ``spec`` at ``setup.batch_size`` (module docstring)."""
    from mcap.io import jsonio

    started = time.monotonic()
    sizes = batchscale.check_sizes(sizes, setup.batch_size, setup.chunks)
    check_merge_to(spec, setup, merge_to)
    results: dict[int, ProfileResult] = {}
    groups = None
    for i, b in enumerate(sizes):
        at = dataclasses.replace(setup, batch_size=b)
        results[b] = profiling.profile(
            spec, at, None, store=store, scheme=scheme, job=job, stream=stream, timeout=timeout,
            name=f"{name or 'capture'}: batch size {b} of {setup.batch_size}", reuse=reuse,
            groups=groups)
        if i == 0 and merge_to is not None:
            first = results[b].profile
            groups = merging.merge_sizes(first.stats, merge_to)
    machine = results[sizes[-1]].profile.machine
    profiles = {b: r.profile for b, r in results.items()}
    if groups is not None:  # the first size was profiled on all layers: merge it too
        first = profiles[sizes[0]]
        profiles[sizes[0]] = merging.merge_profile(first, groups)
    variants = tuple(VariantStats(b, p.stats, "pp", 1, p.runs) for b, p in profiles.items())
    last = profiles[sizes[-1]]
    base = Profile(model=last.model, setup=setup, stats=last.stats, machine=machine,
                   extra=dict(last.extra) if last.extra else None)
    if setup.batch_size in profiles:
        at_target = profiles[setup.batch_size]
        prof = dataclasses.replace(base, stats=at_target.stats, runs=at_target.runs,
                                   variants=variants)
    else:
        prof = batchscale.scaled_profile(base, variants)
    if out is not None:
        jsonio.save(prof, out)
    profile_id = store.save_profile(prof, name=name)
    tallies = [r.tally for r in results.values()]
    tally = Tally(sum(t.measured for t in tallies), sum(t.reused for t in tallies),
                  time.monotonic() - started, tuple(r for t in tallies for r in t.runs),
                  tuple(b for t in tallies for b in t.fallback),
                  composed=sum(t.composed for t in tallies))
    return ProfileResult(prof, profile_id, tally)


def check_merge_to(spec: str, setup: Setup, merge_to: Optional[int]) -> None:
    """``--merge-to`` must leave at least one merged layer per stage and at most the
    model's layers; refused before any run."""
    if merge_to is None:
        return
    layers = profiling.model_info(spec).num_layers
    if not setup.stages <= merge_to <= layers:
        raise McapError(f"--merge-to {merge_to}: the model has {layers} layers and --stages "
                        f"{setup.stages}, so {setup.stages}..{layers} merged layers are possible")


def sizes_from_args(target: int, explicit: Optional[Sequence[int]], capture: bool
                    ) -> Optional[tuple[int, ...]]:
    """The profiling batch sizes the command line asks for: ``--profile-batch-sizes`` as
    given, ``--capture`` a quarter and a half of the target (III-A2), else None (mCAP)."""
    if explicit and capture:
        sizes = tuple(explicit)
        quarter_half = batchscale.default_sizes(target)
        if tuple(sorted(sizes)) != quarter_half:
            raise McapError(f"--capture profiles at {quarter_half[0]},{quarter_half[1]} but "
                            f"--profile-batch-sizes says {','.join(map(str, sizes))}; give one")
        return sizes
    if explicit:
        return tuple(explicit)
    if capture:
        return batchscale.default_sizes(target)
    return None


def profile_merged(spec: str, setup: Setup, out: Optional[Path], *, store, merge_to: int,
                   name: Optional[str] = None, **options) -> ProfileResult:
    """mCAP's profile at ``setup.batch_size`` on all layers, then merged to ``merge_to``
    layers (III-A3). With one batch size nothing is left to profile on the merged layers,
    so this saves no profiling; prediction and search run on ``merge_to`` layers."""
    from mcap.io import jsonio

    check_merge_to(spec, setup, merge_to)
    result = profiling.profile(spec, setup, None, store=store,
                               name=f"{name or 'merge'}: before merging", **options)
    full = result.profile
    prof = merging.merge_profile(full, merging.merge_sizes(full.stats, merge_to))
    if out is not None:
        jsonio.save(prof, out)
    return ProfileResult(prof, store.save_profile(prof, name=name), result.tally)
