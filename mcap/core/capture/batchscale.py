"""Batch-size scaling (CAPTURE III-A2, III-B2): predict a stage's peak at any batch size
from profiling runs at two others. Pure: no torch, no files.

CAPTURE profiles at two batch sizes smaller than the target (default a quarter and a half
of it: mCAP's unbalanced profiling runs would not fit at the target size) and keeps both
sets of statistics as ``Profile.variants`` (parallel ``pp``, degree 1). A stage's peak at
batch size ``b`` is read off the straight line through its predicted peaks at the two
profiled sizes nearest ``b`` (III-B2, Description 2): per *stage*, not per layer, so a
predictor whose stage costs are not additive (``perstage``'s once-per-stage terms) keeps
its form at every batch size.

A profile whose target batch size (``setup.batch_size``) has no statistics of its own is
*extrapolated*: its ``stats`` are the per-layer line at the target (Listing 1.1 is linear,
so that is the line of the paper predictor's stage costs), its ``runs`` are empty (the runs
belong to the variants' batch sizes, never to the target's), and every prediction from it
goes through :func:`costs_at`.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Optional, Sequence

import numpy as np

from mcap.core.costs import StageCosts
from mcap.core.errors import McapError
from mcap.core.capture.plan import batch_line
from mcap.core.setup import split_batch
from mcap.core.types import LayerStats, Profile, VariantStats

# The profile's ``extra`` key naming the batch sizes its statistics were extrapolated from.
EXTRA_KEY = "batch_scaled"
# A value read off a line (bytes) must stay exact in int64 with room for sums of stages
# (issue 28: batch size 999999999999999998 gave "predicted peak -8192.00 PiB" through an
# int64 overflow). Beyond it the prediction is refused, naming the batch size.
MAX_LINE_BYTES = 2**60


def _refuse(value: float, target: int, b_low: int, b_high: int, what: str) -> McapError:
    return McapError(f"at {what} {target:,} the line through {what}s {b_low} and {b_high} "
                     f"predicts {value:.3g} bytes, beyond the {MAX_LINE_BYTES:,} bytes a "
                     f"prediction can hold; predict at a smaller {what}")


def line_bytes(value: float, target: int, b_low: int, b_high: int,
               what: str = "batch size") -> int:
    """A value read off the batch line, as int bytes (an exact Python int), or refused."""
    if not math.isfinite(value) or abs(value) > MAX_LINE_BYTES:
        raise _refuse(value, target, b_low, b_high, what)
    return int(round(value))


def line_array(values: np.ndarray, target: int, b_low: int, b_high: int,
               what: str = "batch size") -> np.ndarray:
    """``line_bytes`` of an array: int64 peaks floored at 0, or refused."""
    values = np.asarray(values, dtype=np.float64)
    bad = ~np.isfinite(values) | (np.abs(values) > MAX_LINE_BYTES)
    if bad.any():
        raise _refuse(float(values[bad].flat[0]), target, b_low, b_high, what)
    return np.maximum(np.rint(values), 0).astype(np.int64)


def pp_variants(profile: Profile) -> tuple[VariantStats, ...]:
    """The pipeline-only statistics of a profile by batch size, ascending."""
    return tuple(sorted((v for v in profile.variants if v.parallel == "pp" and v.degree == 1),
                        key=lambda v: v.batch_size))


def extrapolated(profile: Profile) -> bool:
    """True when the profile's statistics at its own batch size come from the line through
    two other batch sizes (no pp variant at ``setup.batch_size``)."""
    sizes = {v.batch_size for v in pp_variants(profile)}
    return len(sizes) >= 2 and profile.setup.batch_size not in sizes


def default_sizes(target: int) -> tuple[int, int]:
    """III-A2's default profiling batch sizes: a quarter and a half of the target."""
    if target < 4 or target % 4:
        raise McapError(f"--capture profiles at a quarter and a half of the batch size, but "
                        f"{target} is not a multiple of 4; give --profile-batch-sizes B1,B2")
    return target // 4, target // 2


def check_sizes(sizes: Sequence[int], target: int, chunks: int) -> tuple[int, ...]:
    """Two or more distinct profiling batch sizes, each split into ``chunks`` equal
    micro-batches (the runner's rule), sorted; refused naming the values otherwise.
    ``target`` is not refused: a profile that includes it predicts there from measurement
    and elsewhere from the line."""
    sizes = tuple(sorted(set(int(b) for b in sizes)))
    if len(sizes) < 2:
        raise McapError(f"batch-size scaling needs two different profiling batch sizes, got "
                        f"{','.join(map(str, sizes)) or 'none'}")
    if any(b < 1 for b in sizes):
        raise McapError(f"profiling batch sizes must be >= 1, got {','.join(map(str, sizes))}")
    bad = [b for b in sizes if b % chunks]
    if bad:
        raise McapError(f"profiling batch size(s) {','.join(map(str, bad))} do not split into "
                        f"{chunks} equal micro-batches (--chunks {chunks}); every profiling "
                        f"batch size must be a multiple of {chunks}")
    return sizes  # the target may be one of them: its statistics are then measured


def nearest_two(variants: Sequence[VariantStats], target: int) -> tuple[VariantStats, VariantStats]:
    """The two variants the line goes through, ordered by batch size: the profiled sizes
    either side of ``target`` when it lies between two (interpolation), else the two
    nearest it (extrapolation from the end, III-B2's case: both below the target)."""
    if len({v.batch_size for v in variants}) < 2:
        raise McapError(f"batch-size scaling needs statistics at two batch sizes, the profile "
                        f"has {', '.join(str(v.batch_size) for v in variants) or 'none'}")
    below = [v for v in variants if v.batch_size < target]
    above = [v for v in variants if v.batch_size > target]
    if below and above:
        return (max(below, key=lambda v: v.batch_size), min(above, key=lambda v: v.batch_size))
    ranked = sorted(variants, key=lambda v: (abs(v.batch_size - target), v.batch_size))
    first = ranked[0]
    second = next(v for v in ranked if v.batch_size != first.batch_size)
    return tuple(sorted((first, second), key=lambda v: v.batch_size))  # type: ignore[return-value]


def line_stats(low: VariantStats, high: VariantStats, target: int) -> LayerStats:
    """Per-layer M_i and M_a on the line through two batch sizes (III-B2 applied to
    Listing 1.1's terms), rounded to bytes."""
    def at(a, b):
        return line_bytes(batch_line(a, low.batch_size, b, high.batch_size, target), target,
                          low.batch_size, high.batch_size)
    iso = tuple(at(a, b) for a, b in zip(low.stats.mem_isolated, high.stats.mem_isolated))
    added = tuple(None if a is None or b is None else at(a, b)
                  for a, b in zip(low.stats.mem_added, high.stats.mem_added))
    return LayerStats(iso, added)


def scaled_profile(base: Profile, variants: Sequence[VariantStats]) -> Profile:
    """The CAPTURE profile at ``base.setup.batch_size`` from pp ``variants`` at other sizes:
    extrapolated ``stats``, no runs of its own, and ``extra`` saying where they came from."""
    target = base.setup.batch_size
    low, high = nearest_two(variants, target)
    extra = dict(base.extra or {})
    extra[EXTRA_KEY] = {"from": [low.batch_size, high.batch_size], "target": target}
    return dataclasses.replace(base, stats=line_stats(low, high, target), runs=(),
                               variants=tuple(base.variants) + tuple(variants), extra=extra)


def variant_profile(profile: Profile, variant: VariantStats) -> Profile:
    """The plain mCAP profile of one pp variant (its batch size, statistics and runs), which
    any predictor fits as it fits a profile measured at that size."""
    setup = dataclasses.replace(profile.setup, batch_size=variant.batch_size)
    return Profile(model=profile.model, setup=setup, stats=variant.stats, runs=variant.runs,
                   machine=profile.machine)


class LineCosts(StageCosts):
    """Stage costs at ``target`` on the line through two fitted stage costs (III-B2):
    ``stage(a, z) = batch_line(low(a, z), b_low, high(a, z), b_high, target)``."""

    def __init__(self, low: StageCosts, b_low: int, high: StageCosts, b_high: int, target: int):
        if low.num_layers != high.num_layers:
            raise McapError(f"the statistics at batch sizes {b_low} and {b_high} cover "
                            f"{low.num_layers} and {high.num_layers} layers")
        self.low, self.high = low, high
        self.b_low, self.b_high, self.target = int(b_low), int(b_high), int(target)
        self.num_layers = low.num_layers
        self.predictor = low.predictor
        self.table = None  # rounding the line makes it non-additive; searches take the general path
        self.details = dict(low.details or {})
        self.details["batch_line"] = {"from": [self.b_low, self.b_high], "target": self.target}

    def stage_costs(self, first, last):
        m1 = self.low.stage_costs(first, last).astype(np.float64)
        m2 = self.high.stage_costs(first, last).astype(np.float64)
        line = batch_line(m1, self.b_low, m2, self.b_high, self.target)
        # A peak is never negative; only an extrapolation far below both sizes could say so.
        return line_array(line, self.target, self.b_low, self.b_high)


Fit = Callable[[Profile, str], StageCosts]


def check_batch_size(profile: Profile, batch_size: int) -> int:
    """A batch size to predict ``profile`` at: >= 1 and split into the profile's chunks as
    every profiled run's was (``mcap.core.setup.split_batch``, the rule ``profile``
    applies); McapError naming the values otherwise."""
    if batch_size < 1:
        raise McapError(f"--batch-size must be >= 1, got {batch_size}")
    return split_batch(batch_size, profile.setup.chunks,
                       f" (the profile's --chunks {profile.setup.chunks}): predict at a "
                       f"multiple of {profile.setup.chunks}")


def costs_at(profile: Profile, batch_size: Optional[int], predictor: str, fit: Fit) -> StageCosts:
    """``predictor``'s stage costs of ``profile`` at ``batch_size`` (None: the profile's own).

    A profile measured at that batch size is fitted as is; otherwise the line through the
    fitted costs of its two pp variants nearest ``batch_size`` (module docstring). A profile
    without two batch sizes cannot predict another one: refused naming the sizes."""
    target = profile.setup.batch_size
    if batch_size is not None:  # only a size asked for: the profile's own is what it ran
        target = int(batch_size)
        check_batch_size(profile, target)
    variants = pp_variants(profile)
    if not extrapolated(profile) and target == profile.setup.batch_size:
        return fit(profile, predictor)
    exact = next((v for v in variants if v.batch_size == target), None)
    if exact is not None:
        return fit(variant_profile(profile, exact), predictor)
    if len({v.batch_size for v in variants}) < 2:
        raise McapError(f"the profile was measured at batch size {profile.setup.batch_size}"
                        + (f" (and {', '.join(str(v.batch_size) for v in variants)})"
                           if variants else "")
                        + f"; predicting at batch size {target} needs statistics at two batch "
                        "sizes: profile with --capture or --profile-batch-sizes B1,B2")
    low, high = nearest_two(variants, target)
    return LineCosts(fit(variant_profile(profile, low), predictor), low.batch_size,
                     fit(variant_profile(profile, high), predictor), high.batch_size, target)
