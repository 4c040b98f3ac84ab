"""CAPTURE profiling (III-A2, III-A3): mCAP's profiling plan at two batch sizes, stored as
one profile whose target is the training batch size, optionally on merged layers.

    profile(ProfileRequest(spec, setup), sizes=(8, 16), store=...)   # at setup.batch_size
    profile(ProfileRequest(spec, setup), sizes=(8, 16), merge_to=12, store=...)

Each batch size is an ordinary ``mcap.workflow.profiling.profile`` (resumable, stored, with
the oom fallback) under the same setup but that batch size. With ``merge_to`` the smallest
is first profiled on the model's layers, the merger (``mcap.core.capture.merging``) groups them
from those statistics, and then every batch size is profiled on the merged layers only
(Lm - G + 1 runs instead of L - G + 1, at the first size mostly composed from the stages
already measured: what the merger saves is the later sizes' runs). The result's
statistics at the target come from the batch line (``mcap.core.capture.batchscale``) unless the
target is one of the profiled sizes. With ``parallel`` (dp, tp; III-A1) every size also
gets its dp/tp variants (``mcap.workflow.capture.parallel``, on the merged layers with ``merge_to``);
a dp/tp stage at the target is read off the line through two of them per (kind, degree),
as ``mcap.core.capture.hybridcosts.HybridCosts`` does.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Optional, Sequence

from mcap.core.capture import batchscale
from mcap.core.capture import merging
from mcap.core.errors import McapError
from mcap.core.types import Profile, Setup, VariantStats
from mcap.workflow import measuring, profiling
from mcap.workflow.profiling import ProfileRequest, ProfileResult, Tally


def profile(request: ProfileRequest, *, store, sizes: Sequence[int],
            merge_to: Optional[int] = None) -> ProfileResult:
    """The CAPTURE profile of ``request.spec`` at ``request.setup.batch_size`` (module
    docstring): ``request`` at each of ``sizes``. ``request.parallel`` (dp, tp): every batch
    size also gets its dp/tp variants (III-A1), over the merged layers with ``merge_to``; a
    dp/tp stage is then predicted on the line through two of them (III-B2)."""
    from mcap.io import jsonio

    started = time.monotonic()
    spec, setup, name, parallel = request.spec, request.setup, request.name, request.parallel
    sizes = batchscale.check_sizes(sizes, setup.batch_size, setup.chunks)
    check_merge_to(spec, setup, merge_to, request.scheme)
    check_parallel_sizes(parallel, setup, sizes)
    results: dict[int, ProfileResult] = {}
    groups, basis = None, []
    # Each pass is the request at one batch size, stored only (the result is written below).
    at_size = lambda b, **kw: dataclasses.replace(  # noqa: E731
        request, setup=dataclasses.replace(setup, batch_size=b), out=None, press=False, **kw)
    if merge_to is not None:
        # The merger needs M_i and M_a of every layer (III-A3: after the pipeline profiling
        # pass): the smallest batch size on all layers, the cheapest runs.
        first = profiling.profile(at_size(sizes[0], parallel=(), groups=None, name=(
            f"{name or 'capture'}: batch size {sizes[0]} before merging")), store=store)
        basis.append(first)
        groups = merging.merge_sizes(first.profile.stats, merge_to)
    for b in sizes:
        # With merging every size, the first too, is profiled on the merged layers, so each
        # predictor fits its own runs; at the first size most of those runs' stages were
        # measured by the pass before and are composed from the store, not measured again.
        results[b] = profiling.profile(at_size(b, groups=groups, name=(
            f"{name or 'capture'}: batch size {b} of {setup.batch_size}")), store=store)
    machine = results[sizes[-1]].profile.machine
    profiles = {b: r.profile for b, r in results.items()}
    variants = tuple(VariantStats(b, p.stats, "pp", 1, p.runs) for b, p in profiles.items())
    # Each size's dp/tp variants, at that size (mcap.workflow.capture.parallel).
    hybrid = tuple(v for p in profiles.values() for v in p.variants if v.parallel != "pp")
    last = profiles[sizes[-1]]
    base = Profile(model=last.model, setup=setup, stats=last.stats, machine=machine,
                   extra=dict(last.extra) if last.extra else None, variants=hybrid)
    if setup.batch_size in profiles:
        at_target = profiles[setup.batch_size]
        prof = dataclasses.replace(base, stats=at_target.stats, runs=at_target.runs,
                                   variants=hybrid + variants)
    else:
        prof = batchscale.scaled_profile(base, variants)
    if request.out is not None:
        jsonio.save(prof, request.out)
    profile_id = store.save_profile(prof, name=name)
    tally = Tally.combined([r.tally for r in basis + list(results.values())],
                           time.monotonic() - started)  # each size's dp/tp runs too
    return ProfileResult(prof, profile_id, tally)


def check_merge_to(spec: str, setup: Setup, merge_to: Optional[int],
                   scheme: str = "mcap") -> None:
    """``--merge-to`` must leave as many merged layers as the profiling scheme needs on
    ``setup.stages`` (``mcap.core.profiling.schedule.minimum_layers``: the merged layers are profiled
    with it) and at most the model's layers; refused before any run."""
    from mcap.core.profiling.schedule import minimum_layers
    if merge_to is None:
        return
    layers = measuring.model_info(spec).num_layers
    low = max(setup.stages, minimum_layers(setup.stages, scheme))
    if not low <= merge_to <= layers:
        why = (f"the {scheme} scheme profiles at least {low} layers on {setup.stages} stages")
        possible = (f"so {low}..{layers} merged layers are possible" if low <= layers else
                    "so no layer count is possible: profile without --merge-to")
        raise McapError(f"--merge-to {merge_to}: the model has {layers} layers and "
                        f"{why}, {possible}")


def check_parallel_sizes(parallel: Sequence[str], setup: Setup, sizes: Sequence[int]) -> None:
    """``--parallel`` at every profiling batch size: each size's micro-batches must split
    over the profiled degrees (``mcap.workflow.capture.parallel.check_parallel``); refused before any
    run, naming the size."""
    if not parallel:
        return
    from mcap.workflow.capture.parallel import check_parallel
    for b in sizes:
        try:
            check_parallel(parallel, dataclasses.replace(setup, batch_size=b))
        except McapError as exc:
            raise McapError(f"profiling batch size {b}: {exc}") from None


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


def profile_merged(request: ProfileRequest, *, store, merge_to: int) -> ProfileResult:
    """mCAP's profile at ``setup.batch_size`` on all layers, then the same batch size on
    the ``merge_to`` merged layers (III-A3), whose runs are mostly composed from the first
    pass's stages. With one batch size this saves no pipeline profiling; prediction and
    search run on the merged layers. ``request.parallel`` (dp, tp): the dp/tp runs (III-A1)
    are made on the merged layers only, and that is what merging saves here (module
    docstring of ``mcap.workflow.capture.parallel``). The merged profile is the result."""
    from mcap.io import jsonio

    check_merge_to(request.spec, request.setup, merge_to, request.scheme)
    if request.parallel:  # before any run
        from mcap.workflow.capture.parallel import check_parallel
        check_parallel(request.parallel, request.setup)
    started = time.monotonic()
    full = profiling.profile(dataclasses.replace(
        request, out=None, parallel=(), groups=None,
        name=f"{request.name or 'merge'}: before merging"), store=store)
    groups = merging.merge_sizes(full.profile.stats, merge_to)
    merged = profiling.profile(dataclasses.replace(request, out=None, groups=groups),
                               store=store)
    if request.out is not None:
        jsonio.save(merged.profile, request.out)
    tally = Tally.combined([full.tally, merged.tally], time.monotonic() - started)
    return ProfileResult(merged.profile, merged.profile_id, tally)
