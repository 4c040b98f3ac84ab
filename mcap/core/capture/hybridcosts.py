"""Predicting hybrid stages from a profile (CAPTURE III-B): :class:`HybridCosts`, the
per-device peak of every stage config. Pure: no torch, no files.

A stage config is (layers first..last, parallelism, degree) (``mcap.core.capture.plan``). Its
per-device peak comes from:

* ``pp`` (degree 1): the profile's own stage costs under the chosen predictor
  (``mcap.core.recommend.costs_at``), exactly what ``predict --balance`` says (III-B1), at
  any ``batch_size`` it says it at (the profile's batch line, III-B2) and refused where it
  refuses;
* ``dp``/``tp`` at a profiled degree: the same predictor fitted on that variant's
  statistics and runs (``Profile.variants``; per device for dp/tp), "in similar fashion as
  for pipeline-parallel stages" (III-B3). At the profile's batch size the variant is fitted
  as is; profiled at two other batch sizes, the stage's peak is read off the line through
  the two (III-B2, ``mcap.core.capture.plan.batch_line``);
* every kind from engine hybrid: a profile whose pipeline-only runs ran on another
  engine predicts no dp/tp stage (``mcap.workflow.capture.parallel.check_base_engine`` says why);
* ``dp``/``tp`` above the largest profiled degree (e.g. 8 from 2 and 4): a fit through the
  stage's peaks at the two largest profiled degrees. By default the form M(k) = R + S/k
  (``inverse_fit``): a device of a k-way dp stage holds the replicated weights, gradients,
  optimizer state and DDP buckets (R) and 1/k of every micro-batch's activations; a k-way
  tp stage holds the replicated parts (norms, embeddings, the stage's input and output
  activations) and 1/k of the sharded weights and inner activations. III-B3's logarithmic
  fit (``degree_fit="log"``, ``mcap.core.capture.plan.log_degree`` for 2 and 4) assumes the same
  saving per doubling, where the saving halves: measured on 8 CPU devices it read 21% (dp8)
  and 40% (tp8) under the peak, the inverse form 5% and 17%
  (bench/log/2026-11-24-hybrid-plans-measured.md).

A degree that is neither profiled nor above two profiled ones is refused, naming the
``profile --parallel dp,tp`` command that adds it. Per-device peaks are in stage order (a
stage of degree d puts its peak on d devices).

For the search every config's costs are one (L, L+1) table computed once, vectorised, so
Algorithm 4 and the dynamic programme (``mcap.core.capture.meshsearch``) only index lists.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Sequence

import numpy as np

from mcap.core.capture import merging
from mcap.core.capture.meshsearch import configs
from mcap.core.capture.plan import STORE_ENGINE, HybridPlan, Mesh, batch_line, check_plan
from mcap.core.costs import StageCosts
from mcap.core.errors import McapError
from mcap.core.types import Profile, Run, VariantStats

KINDS = ("dp", "tp")
DEGREE_FITS = ("inverse", "log")  # above the profiled degrees (module docstring)


def log_fit(d1: int, m1: float, d2: int, m2: float, degree: int) -> float:
    """The line in log2(degree) through (d1, m1) and (d2, m2) sampled at ``degree``
    (III-B3); for d1, d2 = 2, 4 this is ``mcap.core.capture.plan.log_degree``."""
    if d1 == d2:
        raise McapError(f"the logarithmic degree fit needs two different degrees, got {d1} twice")
    t = (math.log2(degree) - math.log2(d1)) / (math.log2(d2) - math.log2(d1))
    return m1 + (m2 - m1) * t


def inverse_fit(d1: int, m1: float, d2: int, m2: float, degree: int) -> float:
    """M(k) = R + S/k through (d1, m1) and (d2, m2), sampled at ``degree`` (module
    docstring: replicated R, sharded S)."""
    if d1 == d2:
        raise McapError(f"the degree fit needs two different degrees, got {d1} twice")
    s = (m1 - m2) / (1 / d1 - 1 / d2)
    return m2 + s * (1 / degree - 1 / d2)


def degree_fit(form: str, d1: int, m1, d2: int, m2, degree: int):
    if form not in DEGREE_FITS:
        raise McapError(f"degree fit {form!r} is not one of {', '.join(DEGREE_FITS)}")
    return (inverse_fit if form == "inverse" else log_fit)(d1, m1, d2, m2, degree)


# The degrees ``profile --parallel`` measures (III-A1; ``mcap.workflow.capture.parallel``): a k-way
# variant runs on at least 2 groups of k devices, so degree k needs ``--stages`` >= 2k.
PROFILED_DEGREES = (2, 4)


def profile_stages(profile: Profile, degree: Optional[int] = None) -> int:
    """The ``--stages`` (devices) of a profile that measures ``degree`` or, above the
    profiled degrees, the two largest of them (III-B3's fit): at least 2 groups of k."""
    stages = profile.setup.stages
    if degree is None:
        return stages
    return max(stages, 2 * min(degree, max(PROFILED_DEGREES)))


def profile_command(profile: Profile, degree: Optional[int] = None,
                    batch_size: Optional[int] = None) -> str:
    """The command that adds the dp/tp statistics this profile lacks (for ``degree``: over
    enough devices to measure it, :func:`profile_stages`; at ``batch_size``: there)."""
    s = profile.setup
    return (f"python -m mcap profile --model {merging.real_spec(profile)} "
            f"--stages {profile_stages(profile, degree)} "
            f"--batch-size {s.batch_size if batch_size is None else batch_size} --chunks {s.chunks}"
            + (f" --device {s.device}" if s.device != "cpu" else "") + " --parallel dp,tp")


def per_stage_runs(variant: VariantStats) -> tuple[Run, ...]:
    """A dp/tp variant's runs with one peak per *stage* (the predictors' form): its devices
    each read a peak; the stage's is the largest of its ``degree`` devices."""
    out = []
    d = variant.degree
    for r in variant.runs:
        if r.peaks is None or len(r.peaks) == len(r.balance):
            out.append(r)
            continue
        if len(r.peaks) != len(r.balance) * d:
            raise McapError(f"{variant.parallel}{d} profiling run {','.join(map(str, r.balance))} "
                            f"has {len(r.peaks)} peaks; expected one per stage "
                            f"({len(r.balance)}) or per device ({len(r.balance) * d})")
        peaks = tuple(max(r.peaks[i * d:(i + 1) * d]) for i in range(len(r.balance)))
        out.append(dataclasses.replace(r, peaks=peaks, breakdown=None))
    return tuple(out)


def variant_profile(profile: Profile, variant: VariantStats) -> Profile:
    """The plain profile of one variant, which any predictor fits as a measured profile."""
    if variant.stats.num_layers != profile.model.num_layers:
        raise McapError(f"{variant.parallel}{variant.degree} statistics at batch size "
                        f"{variant.batch_size} cover {variant.stats.num_layers} layers; the model "
                        f"has {profile.model.num_layers}")
    runs = per_stage_runs(variant)
    stages = len(runs[0].balance) if runs else profile.setup.stages
    setup = dataclasses.replace(profile.setup, batch_size=variant.batch_size, stages=stages)
    return Profile(model=profile.model, setup=setup, stats=variant.stats, runs=runs,
                   machine=profile.machine)


@dataclass(frozen=True)
class HybridCosts:
    """Per-device predicted peaks of every stage config of a profile (module docstring)."""
    profile: Profile
    predictor: Optional[str] = None
    degree_fit: str = "inverse"  # above the profiled degrees: DEGREE_FITS
    # Predict at this batch size (None: the profile's own), as ``predict --balance
    # --batch-size`` does: pp stages through ``recommend.costs_at`` (the profile's batch
    # line, III-B2), dp/tp stages from their variants at it or the line through two.
    batch_size: Optional[int] = None
    # What a tp stage splits, by name (``mcap.models.spec.tensor_parallel_sizes``: heads,
    # hidden, ffn): a tp degree must divide each (None: not known, not checked).
    tp_sizes: Optional[tuple[tuple[str, int], ...]] = None

    def __post_init__(self):
        if self.batch_size is not None:  # also for plans without a pp stage
            from mcap.core.capture.batchscale import check_batch_size
            check_batch_size(self.profile, int(self.batch_size))

    @property
    def num_layers(self) -> int:
        return self.profile.model.num_layers

    @property
    def layers(self) -> int:
        """The model's real layers, which plans are written in (a merged profile predicts
        over fewer, ``num_layers``; ``mcap.core.capture.merging``)."""
        return merging.real_layers(self.profile)

    @property
    def target(self) -> int:
        return self.profile.setup.batch_size if self.batch_size is None else int(self.batch_size)

    def profiled(self, kind: str) -> dict[int, tuple[VariantStats, ...]]:
        """degree -> the variants usable at the target batch size: the one at it, else the
        two nearest it (III-B2); degrees with neither are left out."""
        out: dict[int, tuple[VariantStats, ...]] = {}
        for d in sorted({v.degree for v in self.profile.variants
                         if v.parallel == kind and v.degree > 1}):
            vs = [v for v in self.profile.variants if v.parallel == kind and v.degree == d]
            exact = [v for v in vs if v.batch_size == self.target]
            if exact:
                out[d] = (exact[0],)
                continue
            ranked = sorted(vs, key=lambda v: (abs(v.batch_size - self.target), v.batch_size))
            two = [ranked[0]] + [v for v in ranked if v.batch_size != ranked[0].batch_size][:1]
            if len(two) == 2:
                out[d] = tuple(sorted(two, key=lambda v: v.batch_size))
        return out

    def why_not(self, kind: str, degree: int) -> Optional[str]:
        """None when (kind, degree) can be predicted, else a sentence naming what is missing
        and how to get it."""
        if kind == "pp":
            return None if degree == 1 else f"a pp stage has degree 1, not {degree}"
        if kind not in KINDS:
            raise McapError(f"parallelism {kind!r} is not one of pp, {', '.join(KINDS)}")
        if kind == "tp" and self.tp_sizes:
            split = ", ".join(f"{name} ({size:,})" for name, size in self.tp_sizes)
            bad = [f"{name} ({size:,})" for name, size in self.tp_sizes if size % degree]
            if bad:
                return (f"a tp{degree:,} stage cannot exist: tensor parallelism splits the "
                        f"model's {split} over its devices, and {degree:,} does not divide "
                        f"its {', '.join(bad)}")
        engine = self.profile.setup.engine
        if engine != STORE_ENGINE and any(v.parallel == kind for v in self.profile.variants):
            # pp stages would come from another runtime than the dp/tp ones and the plan
            # (mcap.workflow.capture.parallel.check_base_engine: engine pipelining reads higher).
            return (f"predicting a {kind}{degree} stage beside pipeline-only stages needs both "
                    f"measured on engine hybrid, which runs the plan; this profile's "
                    f"pipeline-only statistics come from engine {engine!r}, which keeps "
                    f"buffers engine hybrid does not. Profile again with: "
                    f"{profile_command(self.profile)}")
        have = self.profiled(kind)
        if degree in have:
            return None
        if len(have) >= 2 and degree > max(have):
            return None
        others = sorted({v.batch_size for v in self.profile.variants if v.parallel == kind})
        if not have and others:
            # Statistics of this kind exist, but not at (or either side of) the batch size
            # asked for (``--batch-size``): one batch size draws no line (III-B2).
            return (f"predicting a {kind}{degree} stage at batch size {self.target} needs the "
                    f"profile's {kind} statistics at that batch size, or at two batch sizes for "
                    f"the batch-size line (III-B2); the profile has them at batch size "
                    f"{', '.join(map(str, others))} only. Predict at --batch-size {others[-1]}, "
                    f"or add the runs at batch size {self.target} with: "
                    f"{profile_command(self.profile, degree, batch_size=self.target)}")
        said = (f"{kind} degrees {', '.join(str(d) for d in sorted(have))}" if have else
                f"no {kind} statistics")
        stages = profile_stages(self.profile, degree)
        needed = min(degree, max(PROFILED_DEGREES))
        where = ("" if stages == self.profile.setup.stages else
                 f"; it was profiled over {self.profile.setup.stages} devices, and {kind}"
                 f"{needed} needs --stages {stages} (a profile over {stages} devices: a k-way "
                 f"stage is profiled on at least 2 groups of k devices)")
        return (f"predicting a {kind}{degree} stage needs the profile's {kind} statistics at "
                f"degree {degree}, or at two smaller degrees for the degree fit (III-B3); "
                f"the profile has {said}{where}. Add the 2- and 4-way dp and tp runs with: "
                f"{profile_command(self.profile, degree)}")

    def extrapolated(self, plan: HybridPlan) -> tuple[str, ...]:
        """A sentence for each dp/tp degree of ``plan`` beyond those the profile measured:
        its peak is a fit (III-B3), not a reading, and says so with the measured degrees."""
        out = []
        for kind, degree in dict.fromkeys((s.parallel, s.degree) for s in plan.stages
                                          if s.parallel in KINDS):
            have = sorted(self.profiled(kind))
            if have and degree not in have and self.why_not(kind, degree) is None:
                out.append(f"{kind}{degree:,} is beyond the {kind} degrees the profile "
                           f"measured ({', '.join(map(str, have))}): its peak is extrapolated "
                           f"by the {self.degree_fit} degree fit (III-B3), not read from a run")
        return tuple(out)

    def available(self, kind: str, degree: int) -> bool:
        return self.why_not(kind, degree) is None

    def pp_costs(self) -> StageCosts:
        from mcap.core.recommend import costs_at
        return costs_at(self.profile, self.batch_size, self.predictor)

    def _at_degree(self, kind: str, degree: int) -> StageCosts:
        from mcap.core.recommend import costs_of
        vs = self.profiled(kind)[degree]
        low = costs_of(variant_profile(self.profile, vs[0]), self.predictor)
        if len(vs) == 1:
            return low
        return _Line(low, vs[0].batch_size,
                     costs_of(variant_profile(self.profile, vs[1]), self.predictor),
                     vs[1].batch_size, self.target)

    def costs(self, kind: str, degree: int) -> StageCosts:
        """The StageCosts of one (kind, degree): refused naming what is missing."""
        why = self.why_not(kind, degree)
        if why is not None:
            raise McapError(why)
        if kind == "pp":
            return self.pp_costs()
        have = self.profiled(kind)
        if degree in have:
            return self._at_degree(kind, degree)
        d1, d2 = sorted(have)[-2:]
        return _DegreeFit(self._at_degree(kind, d1), d1, self._at_degree(kind, d2), d2, degree,
                          self.degree_fit)

    def stage(self, first: int, last: int, kind: str, degree: int) -> int:
        return self.costs(kind, degree).stage(first, last)

    def peaks(self, plan: HybridPlan) -> tuple[int, ...]:
        """Per-device predicted peaks of a plan over the model's real layers, in stage order;
        its layers must sum to the model's (``check_plan``). A merged profile predicts it on
        its merged layers (``merging.contract_plan``, as ``predict --balance`` does)."""
        sizes = merging.sizes_of(self.profile)
        plan = check_plan(plan, self.num_layers) if sizes is None else \
            merging.contract_plan(plan, sizes)
        out: list[int] = []
        first = 0
        for s in plan.stages:
            c = self.stage(first, first + s.layers - 1, s.parallel, s.degree)
            out += [c] * s.degree
            first += s.layers
        return tuple(out)

    def tables(self, mesh: Mesh, kinds: Sequence[str]) -> dict:
        """(kind, degree) -> C[i][j] (a list of lists) = peak of layers i..j-1, for every
        config the mesh search may place (:func:`placeable`)."""
        return {(k, d): self.costs(k, d).matrix().tolist() for k, d in placeable(self, mesh, kinds)}


class _Line(StageCosts):
    """A stage's peak at the target on the line through two batch sizes (III-B2)."""

    def __init__(self, low: StageCosts, b_low: int, high: StageCosts, b_high: int, target: int):
        self.low, self.high, self.b = low, high, (b_low, b_high, target)
        self.num_layers, self.predictor, self.table = low.num_layers, low.predictor, None

    def stage_costs(self, first, last):
        b1, b2, t = self.b
        m = batch_line(self.low.stage_costs(first, last).astype(np.float64), b1,
                       self.high.stage_costs(first, last).astype(np.float64), b2, t)
        from mcap.core.capture.batchscale import line_array
        return line_array(m, t, b1, b2)  # a peak is never negative; int64 overflow refused


class _DegreeFit(StageCosts):
    """A stage's peak at ``degree`` on the fit through two profiled degrees (III-B3; the
    form: module docstring)."""

    def __init__(self, low: StageCosts, d1: int, high: StageCosts, d2: int, degree: int,
                 form: str):
        self.low, self.high, self.d, self.form = low, high, (d1, d2, degree), form
        self.num_layers, self.predictor, self.table = low.num_layers, low.predictor, None

    def stage_costs(self, first, last):
        d1, d2, d = self.d
        m = degree_fit(self.form, d1, self.low.stage_costs(first, last).astype(np.float64), d2,
                       self.high.stage_costs(first, last).astype(np.float64), d)
        from mcap.core.capture.batchscale import line_array
        return line_array(m, d, d1, d2, "degree")


def placeable(costs: HybridCosts, mesh: Mesh, kinds: Sequence[str]) -> list[tuple[str, int]]:
    """The configs of ``kinds`` on ``mesh`` the profile can predict: a profile of 4 devices
    has dp2 and tp2 but not dp4 or tp4, and its plans on 1x4 may still use the 2-way ones."""
    return [(k, d) for k, d in configs(mesh, tuple(kinds)) if costs.why_not(k, d) is None]
