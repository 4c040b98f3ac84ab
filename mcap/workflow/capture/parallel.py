"""Profiling for hybrid stages (CAPTURE III-A1): ``profile ... --parallel dp,tp``.

For each kind (dp, tp) and degree k in 2 and 4, the G devices of the setup (``--stages``)
are grouped into S = G // k sub-meshes of k devices, and the pipeline profiling
partitionings of the L layers over S stages (the profile's own scheme: mCAP 3.1 or CAPTURE's
Description 1) are run with every stage k-way data- or tensor-parallel, on engine hybrid
(``mcap.runner.capture.device``, one process per device). A degree is profiled only when S >= 2
(one sub-mesh would hold every layer, and no layer's statistics could be told apart), so
``--stages 4`` gives the 2-way runs and ``--stages 8`` the 2- and 4-way runs; degrees above
4 are predicted (III-B3), never profiled. On the CPU the devices are stage processes, so
the degree is bounded by ``--stages`` alone.

The profile's own pipeline-only runs run on engine hybrid as well (``--parallel`` makes it
the default engine; another one is refused, :func:`check_base_engine`): a hybrid plan's pp
stages are predicted from them and its dp/tp stages from the variants, so both must come
from the runtime that runs the plan. Engine pipelining reads higher on the same
partitioning (GPT, 4 stages: 13-24%) because ``torch.distributed.pipelining`` keeps one
activation and one gradient receive buffer per micro-batch for the whole step, and its last
stage keeps every micro-batch's output until the step ends; engine hybrid allocates
those per micro-batch and frees them as it goes (bench/log/2026-11-24-hybrid-plans-measured.md).

With two sub-meshes (degree 4 on 8 devices) the profiling runs measure prefixes on the
first stage and suffixes on the last, so mem_added of the last layer is never measured and
extraction would take it as 0 (``mcap.core.profiling.stats``), over-predicting every stage that starts
at a middle layer by the true value (GPT tp4: the vocabulary head's 3 MiB on a 4 MiB
block). One more run identifies it: the whole model as one k-way stage on k devices
(PM(0..L-1) beside the measured prefix PM(0..L-2)). It is left out when it does not fit
(oom), and the profile then falls back to the 2-stage assumption.

Per-device statistics: every device of a stage holds the same layers, and a stage's peak
is the highest of its devices (equal for dp; on a tp stage device 0 also sends and
receives the stage's activations and gradients, so it can read a little more). mem_isolated and mem_added then follow from those per-stage
peaks exactly as for pipeline stages (``mcap.core.profiling.stats.extract``, mCAP 3.1). The runs are
kept with their per-device peaks in ``Profile.variants`` and recorded in the store in the
``hybrid:<layout>`` study of their plan (``mcap.core.capture.plan.store_engine``), so an
interrupted profile resumes without measuring them again and none is ever read as a
pipeline-only run.

On merged layers (CAPTURE III-A3, ``profile --parallel dp,tp --merge-to Lm``): the sub-mesh
partitionings are those of the Lm merged layers (Lm - S + 1 runs per (kind, degree) under
mCAP's scheme instead of L - S + 1), each measured as the plan over the real layers it
stands for (``mcap.core.capture.merging.expand_plan``) and stored as that real-layer run, so it is
the same record an unmerged profile would measure and reuse; the statistics are extracted
over the merged layers, which is what the pp statistics of a merged profile are over, and
``HybridCosts`` maps plans between the two (``merging.contract_plan`` / ``expand_plan``).
At several batch sizes (``--capture``, ``--profile-batch-sizes``) each size gets its own
variant per (kind, degree), and a dp/tp stage is predicted on the line through two of them
(III-B2, ``mcap.core.capture.hybridcosts.HybridCosts``).
"""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence, TextIO

from mcap.core.errors import McapError
from mcap.core.capture.plan import HybridPlan, StageConfig, check_micro_batches, store_engine
from mcap.core.capture.hybridcosts import PROFILED_DEGREES
from mcap.core.types import LayerStats, Profile, Run, Setup, VariantStats
from mcap.runner.engines import plans_engine
from mcap.store import Store
from mcap.workflow.progress import ProgressBar

KINDS = ("dp", "tp")
DEGREES = PROFILED_DEGREES  # CAPTURE profiles 2- and 4-way only (III-A1)


def parse_kinds(text: str) -> tuple[str, ...]:
    """``dp,tp`` -> ("dp", "tp"); McapError naming an unknown kind."""
    kinds = tuple(dict.fromkeys(k.strip() for k in str(text).split(",") if k.strip()))
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise McapError(f"--parallel {text!r}: expected a comma-separated list of "
                        f"{' and '.join(KINDS)}, e.g. dp,tp")
    return kinds


@dataclass(frozen=True)
class ParallelTally:
    """The dp/tp runs a profile's ``--parallel`` made: how many were measured now or found
    stored, and each one as stored (per-stage peaks, whatever its status)."""
    measured: int = 0
    reused: int = 0
    runs: tuple[Run, ...] = ()

    def __add__(self, other: "ParallelTally") -> "ParallelTally":
        return ParallelTally(self.measured + other.measured, self.reused + other.reused,
                             self.runs + other.runs)


def variant_degrees(kinds: Sequence[str], devices: int) -> list[tuple[str, int]]:
    """The (kind, degree) sets this many devices allow (module docstring)."""
    return [(kind, k) for kind in kinds for k in DEGREES if devices // k >= 2]


def variant_plans(num_layers: int, sub_meshes: int, kind: str, degree: int,
                  scheme: str) -> list[HybridPlan]:
    """The pipeline profiling partitionings over ``sub_meshes`` stages, each stage k-way."""
    from mcap.core.profiling.schedule import profiling_plan
    return [HybridPlan(tuple(StageConfig(n, kind, degree) for n in balance))
            for balance in profiling_plan(num_layers, sub_meshes, scheme).runs]


def _stage_peaks(plan: HybridPlan, run: Run) -> Run:
    """The run with one peak per stage, the highest of its devices."""
    if run.peaks is None:
        return dataclasses.replace(run, balance=plan.balance, breakdown=None)
    stage_of = plan.device_stage()
    peaks = tuple(max(p for d, p in enumerate(run.peaks) if stage_of[d] == s)
                  for s in range(len(plan.stages)))
    return dataclasses.replace(run, balance=plan.balance, peaks=peaks, breakdown=None)


def profile_variant(spec: str, info, setup: Setup, store: Store, kind: str, degree: int,
                    scheme: str, *, timeout: float, stream: Optional[TextIO] = None,
                    machine=None, groups: Optional[Sequence[int]] = None
                    ) -> tuple[VariantStats, ParallelTally]:
    """Profile one (kind, degree): (VariantStats, the runs it measured now or found stored).

    ``info`` is the model's real layers; ``groups`` (real layers per merged layer) profiles
    the merged layers instead (module docstring): the runs and statistics returned are over
    them, the runs measured and stored are over the real layers."""
    from mcap.core.profiling.stats import extract

    layers = info.num_layers if groups is None else len(groups)
    subs = setup.stages // degree
    plans = variant_plans(layers, subs, kind, degree, scheme)
    run_setup = dataclasses.replace(setup, stages=subs * degree, engine=plans_engine(),
                                    schedule="gpipe")
    check_micro_batches(plans[0], setup.batch_size, setup.chunks)
    got = _Collected()
    # The bar counts every run the variant makes, the whole-model one too (issue 26, item
    # 15: "dp2: 6 runs" was printed under a bar that counted to 5/5).
    bar = ProgressBar(len(plans) + (subs == 2), f"profile {kind}{degree}", stream=stream)
    machine = _measure_plans(spec, info, setup, store, plans, run_setup, groups, got,
                             subs=subs, bar=bar, timeout=timeout, machine=machine)
    if subs == 2:  # identify mem_added(L-1) (module docstring)
        whole = HybridPlan((StageConfig(info.num_layers, kind, degree),))
        bar.start(whole.balance)
        run, now = _measure_or_find(spec, info, setup, store, whole,
                                    dataclasses.replace(run_setup, stages=degree),
                                    timeout=timeout, machine=machine)
        bar.advance(whole.balance, measured=bool(now), note=run.status if now else "stored")
        got.measured += now
        got.reused += 1 - now
        got.made.append(_stage_peaks(whole, run))
        if run.status == "ok":
            mine = HybridPlan((StageConfig(layers, kind, degree),))
            # last: variant_profile reads the stages off the first
            got.device_runs.append(_over(run, mine))
            got.stage_runs.append(_over(_stage_peaks(whole, run), mine))
    bar.close()
    stats: LayerStats = extract(got.stage_runs, layers)
    return (VariantStats(setup.batch_size, stats, kind, degree, tuple(got.device_runs)),
            ParallelTally(got.measured, got.reused, tuple(got.made)))


@dataclass
class _Collected:
    """What profiling one (kind, degree) has so far: the per-device and per-stage runs over
    the profiled layers, every run as stored, and how many were measured now or found."""
    device_runs: list = dataclasses.field(default_factory=list)
    stage_runs: list = dataclasses.field(default_factory=list)
    made: list = dataclasses.field(default_factory=list)
    measured: int = 0
    reused: int = 0


def _over(run: Run, plan: HybridPlan) -> Run:
    """The run over the profiled layers (``plan``'s)."""
    return dataclasses.replace(run, balance=plan.balance)


def _measure_plans(spec: str, info, setup: Setup, store: Store, plans, run_setup: Setup,
                   groups: Optional[Sequence[int]], got: _Collected, *, subs: int,
                   bar: ProgressBar, timeout: float, machine):
    """Every plan's run, found in the store (same machine) or measured on one runner opened
    when the first is needed, and recorded with per-stage peaks, each counted on ``bar``;
    returns the machine."""
    from mcap.core.capture import merging
    with contextlib.ExitStack() as stack:
        runner = None
        for plan in plans:
            at = plan if groups is None else merging.expand_plan(plan, groups)
            study = store.study(info, dataclasses.replace(setup, stages=subs,
                                                          engine=store_engine(at)))
            found = store.find_run(study, at.balance, machine=machine) \
                if machine is not None else None
            if found is not None:
                # The store keeps the per-stage record; per-device peaks are not stored.
                got.reused += 1
                got.made.append(found)
                bar.advance(at.balance, measured=False, note="stored")
                got.device_runs.append(_over(found, plan))
                got.stage_runs.append(_over(found, plan))
                continue
            if runner is None:
                from mcap.runner import open_runner
                runner = stack.enter_context(open_runner(spec, run_setup, timeout=timeout))
                machine = machine or runner.machine
            bar.start(at.balance)
            run = runner.measure_plan(at)
            staged = _stage_peaks(at, run)
            store.record_run(study, staged, kind="profile", machine=runner.machine)
            got.measured += 1
            got.made.append(staged)
            bar.advance(at.balance, measured=True, note=run.status)
            got.device_runs.append(_over(run, plan))
            got.stage_runs.append(_over(staged, plan))
    return machine


def _measure_or_find(spec: str, info, setup: Setup, store: Store, plan: HybridPlan,
                     run_setup: Setup, *, timeout: float, machine) -> tuple[Run, int]:
    """One plan's run from the store, else measured on its own runner and recorded:
    (per-device run, 1 if measured now)."""
    study = store.study(info, dataclasses.replace(setup, stages=len(plan.stages),
                                                  engine=store_engine(plan)))
    found = store.find_run(study, plan.balance, machine=machine) if machine is not None else None
    if found is not None:
        return found, 0
    from mcap.runner import open_runner
    with open_runner(spec, run_setup, timeout=timeout) as runner:
        run = runner.measure_plan(plan)
        store.record_run(study, _stage_peaks(plan, run), kind="profile", machine=runner.machine)
    return run, 1


def check_base_engine(engine: str) -> None:
    """Refuse dp/tp statistics beside pipeline-only ones from another runtime (module
    docstring: engine pipelining's extra buffers would be predicted for every pp stage of a
    hybrid plan that engine hybrid runs without them)."""
    from mcap.runner.engines import get
    if not get(engine).plans:
        raise McapError(f"--parallel measures its dp/tp stages on engine hybrid, so the "
                        f"profile's pipeline-only runs must run there too; --engine is "
                        f"{engine!r} (it keeps per-micro-batch buffers engine hybrid does not, "
                        f"reading up to ~25% higher). Use --engine hybrid, or leave --engine "
                        f"out")


def check_parallel(kinds: Sequence[str], setup: Setup) -> list[tuple[str, int]]:
    """The (kind, degree) sets to profile, or McapError naming the values, before any run."""
    check_base_engine(setup.engine)
    todo = variant_degrees(kinds, setup.stages)
    if not todo:
        raise McapError(f"--parallel {','.join(kinds)} needs at least 4 devices (2 sub-meshes "
                        f"of 2); --stages is {setup.stages}")
    for kind, degree in todo:
        stages = (StageConfig(1, kind, degree),)
        check_micro_batches(HybridPlan(stages), setup.batch_size, setup.chunks)
    return todo


def add_parallel_variants(prof: Profile, spec: str, store: Store, kinds: Sequence[str],
                          scheme: str = "mcap", *, timeout: float,
                          stream: Optional[TextIO] = None) -> tuple[Profile, ParallelTally]:
    """``prof`` with a VariantStats per (kind, degree) the setup's devices allow (CAPTURE
    III-A1) at its batch size, and the dp/tp runs that took (measured now or found stored,
    for the command's summary); McapError when they allow none, naming the device count. A
    merged ``prof`` (``mcap.core.capture.merging``) gets them over its merged layers."""
    from mcap.core.capture import merging
    from mcap.workflow.measuring import model_info

    setup = prof.setup
    todo = check_parallel(kinds, setup)
    groups = merging.sizes_of(prof)
    info = prof.model if groups is None else model_info(spec)
    variants = [v for v in prof.variants
                if (v.batch_size, v.parallel, v.degree) not in
                {(setup.batch_size, k, d) for k, d in todo}]
    tally = ParallelTally()
    for kind, degree in todo:
        v, made = profile_variant(spec, info, setup, store, kind, degree, scheme,
                                  timeout=timeout, stream=stream, machine=prof.machine,
                                  groups=groups)
        variants.append(v)
        tally += made
    return dataclasses.replace(prof, variants=tuple(variants)), tally


__all__ = ["KINDS", "DEGREES", "ParallelTally", "parse_kinds", "check_base_engine", "variant_degrees",
           "variant_plans", "check_parallel",
           "profile_variant", "add_parallel_variants"]
