"""How well a CPU profile plans for a GPU (issue 30, item 3), measured on the bundled data:
for every bundled CPU profile whose setup a bundled GPU sweep shares (same model, stages,
batch size, micro-batches, schedule, checkpointing), the profile's own prediction and its
``--for cuda`` translation (``mcap.core.forcuda``) against what the GPU measured. The
Partition-space page states it beside "CPU as a stand-in for a GPU"."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mcap.core.errors import McapError
from mcap.core.evaluate import percentile, rank_agreement
from mcap.core.types import Run

_SAME = ("stages", "batch_size", "chunks", "schedule", "checkpoint", "optimizer")


@dataclass(frozen=True)
class ForCuda:
    profile: str        # file names
    sweep: str
    gpu: str            # the GPU the sweep was measured on
    n: int              # ok partitionings compared
    spearman_cpu: float  # the CPU prediction as it is
    p90_cpu: float
    spearman: float     # translated with --for cuda
    p90: float


def _score(costs, runs) -> tuple[float, float]:
    predicted = [Run(r.balance, "ok", tuple(costs.peaks(r.balance)), 0.0) for r in runs]
    errors = [abs(max(p.peaks) - max(r.peaks)) / max(r.peaks) for p, r in zip(predicted, runs)]
    return rank_agreement(predicted, runs).spearman, percentile(errors, 90)


def bundled_checks(data_dir: Path) -> list[ForCuda]:
    """Every CPU profile / GPU sweep pair of ``data_dir`` with one setup (module docstring);
    a pair that cannot be compared is left out."""
    from mcap.core import forcuda
    from mcap.core.recommend import costs_of
    from mcap.io import jsonio

    profiles, sweeps = [], []
    for p in sorted(Path(data_dir).glob("*.profile.json")):
        try:
            prof = jsonio.load_profile(p)
        except McapError:
            continue
        if prof.setup.device == "cpu":
            profiles.append((p.name, prof))
    for p in sorted(Path(data_dir).glob("*.sweep.json")):
        try:
            sw = jsonio.load_sweep(p)
        except McapError:
            continue
        if sw.setup.device == "cuda":
            sweeps.append((p.name, sw))
    out = []
    for pname, prof in profiles:
        for sname, sw in sweeps:
            if prof.model.spec != sw.model.spec or any(
                    getattr(prof.setup, f) != getattr(sw.setup, f) for f in _SAME):
                continue
            runs = [r for r in sw.runs if r.status == "ok" and r.peaks]
            if len(runs) < 3:
                continue
            try:
                base = costs_of(prof)
                translated = forcuda.for_cuda(base, prof, forcuda.parse_target("cuda"))
                s0, p0 = _score(base, runs)
                s1, p1 = _score(translated, runs)
            except McapError:
                continue
            gpu = (sw.machine.gpu if sw.machine and sw.machine.gpu else "a GPU")
            out.append(ForCuda(pname, sname, gpu, len(runs), s0, p0, s1, p1))
    return out


def sentence(check: ForCuda) -> str:
    """One line for the page."""
    return (f"**{check.profile}** planned for {check.gpu} (its CPU bytes translated for the "
            f"GPU), against "
            f"{check.n:,} partitionings measured there ({check.sweep}): Spearman "
            f"**{check.spearman:.3f}**, overall error p90 **{100 * check.p90:.1f}%** (the CPU "
            f"prediction as it is: Spearman {check.spearman_cpu:.2f}, p90 "
            f"{100 * check.p90_cpu:.1f}%).")


__all__ = ["ForCuda", "bundled_checks", "sentence"]
