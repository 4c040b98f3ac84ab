"""Recommending a hybrid plan on a mesh (CAPTURE III-C: Algorithm 4 or the exact DP,
``mcap.core.capture.meshsearch``) from the per-device peaks :class:`HybridCosts` predicts
(``mcap.core.capture.hybridcosts``: how each stage config is predicted), and the batch-size
line of one stage (III-B2, :func:`batch_fit`). Pure: no torch, no files.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.capture import meshsearch, merging
from mcap.core.capture.hybridcosts import (  # noqa: F401  (importable here as before)
    DEGREE_FITS, KINDS, PROFILED_DEGREES, HybridCosts, inverse_fit, log_fit,
    per_stage_runs, placeable, profile_command, profile_stages, variant_profile,
)
from mcap.core.capture.meshsearch import MeshResult, configs
from mcap.core.capture.plan import HybridPlan, Mesh, batch_line
from mcap.core.errors import McapError, SearchTooLarge
from mcap.core.types import Profile

# The DP's stage placements are at most L(L+1)/2 x devices x configs: 2x4 with 30 layers is
# 18,600; past this cap (seconds of pure Python) a mesh is refused before anything is fitted.
MAX_PLACEMENTS = 2_000_000


@dataclass(frozen=True)
class MeshRecommendation:
    """The plan a mesh search picked, its per-device peaks (stage order), what was searched."""
    method: str
    mesh: Mesh
    plan: HybridPlan
    peaks: tuple[int, ...]
    seconds: float
    evaluated: int
    kinds: tuple[str, ...]  # the parallelisms searched besides pp
    prune: bool
    predictor: str
    missing: tuple[str, ...] = ()  # why a kind was left out of the search
    batch_size: Optional[int] = None  # predicted at (the profile's own when None is asked)
    line: Optional[dict] = None  # the pp costs' details: ``batch_line`` when on the line

    @property
    def peak(self) -> int:
        return max(self.peaks)

    def as_json(self) -> dict:
        return {"mesh": self.mesh.text, "method": self.method, "prune": self.prune,
                "predictor": self.predictor, "plan_text": self.plan.text,
                "plan": self.plan.as_json(), "predicted_peaks": list(self.peaks),
                "predicted_peak": self.peak, "seconds": self.seconds,
                "evaluated": self.evaluated, "kinds": list(self.kinds),
                "missing": list(self.missing), "batch_size": self.batch_size}


def searchable(costs: HybridCosts, mesh: Mesh) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The kinds some degree 2..K of which can be predicted, and for each kind the first
    degree that cannot, why (:func:`placeable` lists the degrees)."""
    kinds, missing = [], []
    for k in KINDS:
        whys = [costs.why_not(k, d) for kind, d in configs(mesh, (k,)) if kind == k]
        if any(w is None for w in whys):
            kinds.append(k)
        why = next((w for w in whys if w is not None), None)
        if why is not None:
            missing.append(why)
    return tuple(kinds), tuple(missing)


def recommend_mesh(profile: Profile, mesh: Mesh, method: str = "exact", prune: bool = True,
                   predictor: Optional[str] = None,
                   kinds: Optional[Sequence[str]] = None,
                   degree_fit: str = "inverse",
                   batch_size: Optional[int] = None,
                   tp_sizes: Optional[tuple[tuple[str, int], ...]] = None) -> MeshRecommendation:
    """The plan of the profile's layers on ``mesh`` with the lowest predicted per-device peak
    (III-C, Algorithm 4 or the exact DP; both give the same plan). Configs (kind, degree) the
    profile cannot predict are left out, and ``missing`` says why; with no dp/tp config left
    the plans are pipeline-only (one layer group per device). ``batch_size``: predict there
    (``HybridCosts.batch_size``), as ``recommend --stages --batch-size`` does. ``tp_sizes``:
    what a tp stage splits (``HybridCosts.tp_sizes``); a degree that does not divide them
    is left out, and ``missing`` says why."""
    if method not in meshsearch.names():
        raise McapError(f"mesh method {method!r} is not one of {', '.join(meshsearch.names())}")
    searcher = meshsearch.get(method)
    hc = HybridCosts(profile, predictor, degree_fit, batch_size=batch_size, tp_sizes=tp_sizes)
    pp = hc.pp_costs()  # refuses a batch size the profile cannot predict, before searching
    found, missing = searchable(hc, mesh)
    if kinds is not None:
        bad = [k for k in kinds if k not in KINDS]
        if bad:
            raise McapError(f"parallelism {', '.join(bad)} is not one of {', '.join(KINDS)}")
        found = tuple(k for k in found if k in kinds)
    L = hc.num_layers
    if L < mesh.nodes or (not found and L < mesh.devices):
        raise McapError(f"the model has {L} layers; mesh {mesh.text} needs at least "
                        f"{mesh.devices if not found else mesh.nodes} (pipeline-only plans put "
                        f"one layer group on every device)")
    opts = placeable(hc, mesh, found)
    placements = L * (L + 1) // 2 * mesh.devices * len(opts)
    if placements > MAX_PLACEMENTS:
        raise SearchTooLarge(f"mesh {mesh.text} with {L} layers means up to {placements:,} stage "
                             f"placements, over the cap of {MAX_PLACEMENTS:,}; choose a smaller "
                             "mesh (or merge layers)")
    tables = hc.tables(mesh, found)

    def cost(i: int, z: int, par: str, d: int) -> int:
        return tables[(par, d)][i][z + 1]

    res: MeshResult = searcher.search(L, mesh, cost, prune=prune, kinds=found, only=opts)
    sizes = merging.sizes_of(profile)
    # The search ran over a merged profile's merged layers; the plan is shown, measured and
    # predicted again over the real ones, as ``recommend --stages`` prints its balance.
    plan = res.plan if sizes is None else merging.expand_plan(res.plan, sizes)
    return MeshRecommendation(method, mesh, plan, tuple(int(p) for p in res.peaks),
                              res.seconds, res.explored, found,
                              prune=prune and searcher.prunes,  # the DP never prunes
                              predictor=pp.predictor, missing=missing, batch_size=hc.target,
                              line=dict(pp.details or {}))


@dataclass(frozen=True)
class BatchFit:
    """One stage's batch-size line (III-B2): its predicted peaks at two profiled batch sizes
    and the line's value at the target."""
    first: int
    last: int
    sizes: tuple[int, int]
    peaks: tuple[int, int]
    target: int

    @property
    def at_target(self) -> int:
        from mcap.core.capture.batchscale import line_bytes
        return line_bytes(batch_line(self.peaks[0], self.sizes[0], self.peaks[1], self.sizes[1],
                                     self.target), self.target, *self.sizes)


def pp_batch_sizes(profile: Profile) -> tuple[int, ...]:
    """Batch sizes the profile has pipeline-only statistics at, besides its target."""
    return tuple(sorted({v.batch_size for v in profile.variants
                         if v.parallel == "pp" and v.degree == 1} - {profile.setup.batch_size}))


def batch_fit(profile: Profile, first: int, last: int, predictor: Optional[str] = None) -> BatchFit:
    """The line through pp stage ``first..last``'s predicted peaks at the two profiled batch
    sizes nearest the target (``profile --capture``: B/4 and B/2); refused naming them.
    ``first..last`` are real layers (a merged profile's stage: ``merging.merged_window``);
    the returned fit keeps them."""
    from mcap.core.recommend import costs_of
    sizes = merging.sizes_of(profile)
    a, z = (first, last) if sizes is None else merging.merged_window(first, last, sizes)
    sizes = pp_batch_sizes(profile)
    target = profile.setup.batch_size
    if len(sizes) < 2:
        raise McapError(f"the batch-size line needs pipeline-only statistics at two batch sizes "
                        f"besides the target {target}; the profile has "
                        f"{', '.join(map(str, sizes)) or 'none'}. Profile with --capture "
                        f"(batch sizes {target // 4} and {target // 2})")
    two = sorted(sorted(sizes, key=lambda b: (abs(b - target), b))[:2])
    peaks = []
    for b in two:
        v = next(v for v in profile.variants if v.key == (b, "pp", 1))
        peaks.append(costs_of(variant_profile(profile, v), predictor).stage(a, z))
    return BatchFit(first, last, (two[0], two[1]), (peaks[0], peaks[1]), target)
