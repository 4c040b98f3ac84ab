"""Hybrid plans (CAPTURE, section III): pipeline stages that each have their own kind of
parallelism and degree, placed on a mesh of N nodes with K devices each. Pure.

A plan is written as comma-separated stages (the command line's contract): ``N`` for N
layers on one device, ``N:dpK`` / ``N:tpK`` for N layers on K devices with data / tensor
parallelism; ``3,3,10:tp2`` uses 4 devices. A stage config (III-B) is the tuple (layers,
parallelism, degree); a pipeline-only stage has parallelism ``pp`` and degree 1.

Placement on a mesh (III-C): stages fill the devices in order, node by node; a stage never
spans two nodes, every node's degrees sum to K, and no device is left unused.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import InvalidPartitioning, McapError

PARALLEL = ("pp", "dp", "tp")
_STAGE = re.compile(r"^\s*([0-9]+)\s*(?::\s*(dp|tp)\s*([0-9]+))?\s*$")

# Sizes are refused when a plan or mesh is parsed, before anything is allocated or started
# (a plan of 10:tp100000000 once asked for 10^8 per-device peaks, 4:tp1000 for 1000
# processes): a degree is a power of 2 (the configs of III-C; a node's K devices take them
# in halves), and a plan or mesh has at most MAX_DEVICES devices, far beyond any mesh the
# profiles here predict. Whether this machine can start that many is the engine's check
# (``mcap.runner.engines.base``: CPU processes, GPUs).
MAX_DEVICES = 65_536
_DIGITS = 9  # a longer count is over every bound; int() of 4,300+ digits is itself an error


def _shown(text: str) -> str:
    text = str(text)
    return repr(text) if len(text) <= 60 else repr(text[:57] + "...")


def _count(digits: str, what: str) -> int:
    """A count from its digits, refusing one too long to be any plan's before ``int()``."""
    if len(digits) > _DIGITS:
        raise InvalidPartitioning(f"{what} {digits[:12]}... ({len(digits)} digits) is over "
                                  f"every bound (a plan or mesh has at most {MAX_DEVICES:,} "
                                  "devices)")
    return int(digits)


def check_degree(degree: int, where: str) -> int:
    """A stage's degree: a power of 2 of at most MAX_DEVICES (module comment above)."""
    if degree < 1:
        raise InvalidPartitioning(f"{where} has degree {degree}; it must be at least 1")
    if degree & (degree - 1):
        raise InvalidPartitioning(f"{where} has degree {degree}, which is not a power of 2 "
                                  "(1, 2, 4, 8, ...: CAPTURE's stage configs, III-C)")
    if degree > MAX_DEVICES:
        raise InvalidPartitioning(f"{where} has degree {degree:,}; a plan has at most "
                                  f"{MAX_DEVICES:,} devices")
    return degree


@dataclass(frozen=True)
class StageConfig:
    layers: int
    parallel: str = "pp"
    degree: int = 1

    @property
    def text(self) -> str:
        return str(self.layers) if self.parallel == "pp" else f"{self.layers}:{self.parallel}{self.degree}"


@dataclass(frozen=True)
class HybridPlan:
    stages: tuple[StageConfig, ...]

    @property
    def text(self) -> str:
        return ",".join(s.text for s in self.stages)

    @property
    def balance(self) -> tuple[int, ...]:
        return tuple(s.layers for s in self.stages)

    @property
    def devices(self) -> int:
        return sum(s.degree for s in self.stages)

    @property
    def pipeline_only(self) -> bool:
        return all(s.parallel == "pp" for s in self.stages)

    def as_json(self) -> list[dict]:
        return [{"layers": s.layers, "parallel": s.parallel, "degree": s.degree}
                for s in self.stages]

    def device_stage(self) -> tuple[int, ...]:
        """The stage index of every device, in device order."""
        return tuple(i for i, s in enumerate(self.stages) for _ in range(s.degree))


@dataclass(frozen=True)
class Mesh:
    nodes: int
    per_node: int

    @property
    def devices(self) -> int:
        return self.nodes * self.per_node

    @property
    def text(self) -> str:
        return f"{self.nodes}x{self.per_node}"


def parse_mesh(text: str) -> Mesh:
    """``2x4`` -> Mesh(2 nodes, 4 devices each)."""
    m = re.fullmatch(r"\s*([0-9]+)\s*[xX]\s*([0-9]+)\s*", str(text))
    if m:
        nodes, per_node = (_count(g, f"mesh {_shown(text)}:") for g in m.groups())
    if not m or nodes < 1 or per_node < 1:
        raise McapError(f"mesh {_shown(text)} is not NxK with N nodes and K devices per node, "
                        "both >= 1 (e.g. 1x4 or 2x4)")
    if nodes * per_node > MAX_DEVICES:
        raise McapError(f"mesh {text.strip()} has {nodes * per_node:,} devices; a mesh has at "
                        f"most {MAX_DEVICES:,}")
    return Mesh(nodes, per_node)


def parse_plan(text: str) -> HybridPlan:
    """``3,3,10:tp2`` -> HybridPlan; errors name the stage that does not parse."""
    parts = str(text).split(",")
    shown = _shown(text)
    stages, devices = [], 0
    for i, part in enumerate(parts):
        m = _STAGE.match(part)
        if not m:
            raise InvalidPartitioning(
                f"plan {shown}: stage {i} is {_shown(part.strip())}; write N (N layers on one "
                "device) or N:dpK / N:tpK (N layers on K devices), e.g. 3,3,10:tp2")
        layers = _count(m.group(1), f"plan {shown}: stage {i}'s layer count")
        if layers < 1:
            raise InvalidPartitioning(f"plan {shown}: stage {i} has {layers} layers; every "
                                      "stage needs at least one")
        if m.group(2):
            degree = check_degree(_count(m.group(3), f"plan {shown}: stage {i}'s degree"),
                                  f"plan {shown}: stage {i}")
            stages.append(StageConfig(layers, m.group(2) if degree > 1 else "pp", degree))
        else:
            stages.append(StageConfig(layers))
        devices += stages[-1].degree
        if devices > MAX_DEVICES:  # checked as it grows: 10^6 stages of tp65536 stop at once
            raise InvalidPartitioning(f"plan {shown} uses more than {MAX_DEVICES:,} devices "
                                      f"(stages 0..{i} already {devices:,}); a plan has at "
                                      f"most {MAX_DEVICES:,}")
    return HybridPlan(tuple(stages))


def check_plan(plan: HybridPlan, num_layers: int, mesh: Optional[Mesh] = None) -> HybridPlan:
    """Raise naming the numbers when the plan's layers do not sum to the model's or its
    degrees do not fit the mesh (module docstring)."""
    total = sum(plan.balance)
    if total != num_layers:
        raise InvalidPartitioning(f"plan {plan.text} places {total} layers but the model has "
                                  f"{num_layers}")
    if mesh is None:
        return plan
    if plan.devices != mesh.devices:
        raise InvalidPartitioning(f"plan {plan.text} uses {plan.devices} devices but mesh "
                                  f"{mesh.text} has {mesh.devices}; no device may be left unused")
    used = 0
    for i, s in enumerate(plan.stages):
        if s.degree > mesh.per_node:
            raise InvalidPartitioning(f"plan {plan.text}: stage {i} has degree {s.degree} but a "
                                      f"node of mesh {mesh.text} has {mesh.per_node} devices")
        if used % mesh.per_node + s.degree > mesh.per_node:
            node = used // mesh.per_node
            raise InvalidPartitioning(
                f"plan {plan.text}: stage {i} ({s.degree} devices) would span nodes {node} and "
                f"{node + 1}; the degrees on a node must sum to {mesh.per_node}")
        used += s.degree
    return plan


def log_degree(m2: float, m4: float, degree: int) -> float:
    """Per-device memory at ``degree`` from the 2- and 4-way values (III-B3): a fixed part
    plus a part divided by the degree sum to a curve that a logarithm in the degree fits;
    through (2, m2) and (4, m4): m(d) = m2 + (m4 - m2) * (log2 d - 1)."""
    import math
    return m2 + (m4 - m2) * (math.log2(degree) - 1)


def batch_line(m1: float, b1: int, m2: float, b2: int, target: int) -> float:
    """The straight line through (b1, m1) and (b2, m2) sampled at ``target`` (III-B2)."""
    if b1 == b2:
        raise McapError(f"batch-size scaling needs two different batch sizes, got {b1} twice")
    return m1 + (m2 - m1) * (target - b1) / (b2 - b1)


def batch_at_capacity(m1: float, b1: int, m2: float, b2: int, capacity: float) -> Optional[int]:
    """The inverse of :func:`batch_line`: the largest whole batch size whose value on the line
    through (b1, m1) and (b2, m2) is at most ``capacity`` (0 when not even 0 fits); None when
    the line does not rise (no batch size reaches the capacity)."""
    if b1 == b2:
        raise McapError(f"batch-size scaling needs two different batch sizes, got {b1} twice")
    slope = (m2 - m1) / (b2 - b1)
    if slope <= 0:
        return None
    return max(0, int(b1 + (capacity - m1) // slope))


def merge_layers(mem_isolated: Sequence[int], mem_added: Sequence[Optional[int]],
                 target: int) -> tuple[tuple[int, ...], tuple[int, ...], tuple[Optional[int], ...]]:
    """CAPTURE's layer merger (III-A3): merge adjacent layers, always the pair whose merged
    M_i is lowest, until ``target`` remain. Merging l and l+1:
    M_i(l, l+1) = M_i(l) + M_a(l+1), M_a(l, l+1) = M_a(l) + M_a(l+1).

    Returns (sizes: original layers per merged layer, merged M_i, merged M_a)."""
    iso, added = list(mem_isolated), list(mem_added)
    if not 1 <= target <= len(iso):
        raise McapError(f"--merge-to {target}: the model has {len(iso)} layers; choose 1.."
                        f"{len(iso)}")
    sizes = [1] * len(iso)
    while len(iso) > target:
        merged = [iso[l] + added[l + 1] for l in range(len(iso) - 1)]
        l = min(range(len(merged)), key=lambda k: (merged[k], k))
        iso[l] = merged[l]
        added[l] = None if l == 0 else added[l] + added[l + 1]
        sizes[l] += sizes[l + 1]
        del iso[l + 1], added[l + 1], sizes[l + 1]
    return tuple(sizes), tuple(iso), tuple(added)


# --- running a plan (mcap.runner.capture.device) and recording it (mcap.store) --------------------

def as_plan(balance_or_plan) -> HybridPlan:
    """A HybridPlan from a plan, its text, its StageConfigs, or a pipeline-only balance."""
    if isinstance(balance_or_plan, HybridPlan):
        return balance_or_plan
    if isinstance(balance_or_plan, str):
        return parse_plan(balance_or_plan)
    items = tuple(balance_or_plan)
    return HybridPlan(tuple(s if isinstance(s, StageConfig) else StageConfig(int(s))
                            for s in items))


def check_micro_batches(plan: HybridPlan, batch_size: int, chunks: int) -> int:
    """The micro-batch size, or McapError naming the values: every micro-batch is split
    evenly over the devices of a data-parallel stage (each takes its share)."""
    if chunks < 1 or batch_size % chunks:
        raise McapError(f"plan {plan.text}: batch size {batch_size} does not split into "
                        f"{chunks} equal micro-batches; a hybrid run needs batch size % chunks "
                        "== 0")
    micro = batch_size // chunks
    for i, s in enumerate(plan.stages):
        if s.parallel == "dp" and micro % s.degree:
            raise McapError(f"plan {plan.text}: stage {i} is {s.text} but the micro-batch "
                            f"size {micro} (batch {batch_size} / {chunks} chunks) is not "
                            f"divisible by its degree {s.degree}")
    return micro


def holder_rows(stage: StageConfig, micro: int) -> tuple[tuple[int, int], ...]:
    """The rows of a micro-batch each device of ``stage`` holds the gradient of (and sends
    on): a data-parallel device its own share [j*m/k, (j+1)*m/k); on a pipeline or tensor
    stage every device holds all rows (replicated) and device 0 of the stage sends them."""
    if stage.parallel == "dp":
        return tuple((j * micro // stage.degree, (j + 1) * micro // stage.degree)
                     for j in range(stage.degree))
    return ((0, micro),) + ((0, 0),) * (stage.degree - 1)


def need_rows(stage: StageConfig, micro: int, local: int) -> tuple[int, int]:
    """The rows device ``local`` of ``stage`` computes: its share for dp, all otherwise."""
    if stage.parallel == "dp":
        return holder_rows(stage, micro)[local]
    return (0, micro)


def layout(plan: HybridPlan) -> str:
    """The plan without its layer counts, e.g. ``pp,pp,tp2`` for ``3,3,10:tp2``."""
    return ",".join("pp" if s.parallel == "pp" else f"{s.parallel}{s.degree}"
                    for s in plan.stages)


STORE_ENGINE = "hybrid"


def store_engine(plan: HybridPlan) -> str:
    """The engine name a hybrid run's study is recorded under: ``hybrid:<layout>``, so its
    runs (balance = layers per stage, peaks = per stage) are never read as, or reused for,
    a pipeline-only run, and plans differing only in their layer counts share a study."""
    return f"{STORE_ENGINE}:{layout(plan)}"


def plan_from_store(engine: str, balance: Sequence[int]) -> Optional[HybridPlan]:
    """The plan of a stored run (inverse of :func:`store_engine`); None for other engines."""
    if not str(engine).startswith(STORE_ENGINE + ":"):
        return None
    kinds = str(engine)[len(STORE_ENGINE) + 1:].split(",")
    if len(kinds) != len(balance):
        raise McapError(f"engine {engine!r} has {len(kinds)} stages but balance "
                        f"{list(balance)} has {len(balance)}")
    return parse_plan(",".join(str(n) if k == "pp" else f"{n}:{k}"
                               for n, k in zip(balance, kinds)))


def stored_run(plan: HybridPlan, run):
    """The record of a hybrid run in its ``hybrid:<layout>`` study (``store_engine``): one
    peak per stage, the highest of the stage's devices (a study's runs have one peak per
    stage)."""
    import dataclasses
    peaks = None
    if run.peaks is not None:
        stage_of = plan.device_stage()
        peaks = tuple(max(p for d, p in enumerate(run.peaks) if stage_of[d] == s)
                      for s in range(len(plan.stages)))
    return dataclasses.replace(run, balance=plan.balance, peaks=peaks, breakdown=None)
