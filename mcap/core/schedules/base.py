"""The schedule registry (issue 39; ARCHITECTURE.md, "Registries"). Pure: no torch, no files.

A pipeline schedule is one of ``torch.distributed.pipelining.schedules``' classes, registered
once with its name (the CLI word), label, help, the torch class it runs and its capabilities
as flags:

- ``stages_per_rank``: ``"one"`` (GPipe, 1F1B), ``"many"`` (``--virtual-stages V``, V >= 1:
  interleaved 1F1B, looped BFS, interleaved zero bubble) or ``"two"`` (the V-shaped ones, V
  fixed at 2: ZBV, DualPipeV);
- ``placement``: ``"loop"`` (rank r holds stages r, r+G, r+2G, ...) or ``"v"`` (rank r holds r
  and 2G-1-r): what torch's ``generate_stage_to_rank_mapping`` does for each style;
- ``split_backward``: the backward is split into I (inputs) and W (weights) actions, so what
  W needs lives past I (zero bubble);
- ``microbatch_rule``: torch's rule on the micro-batch count M, checked before anything runs
  (:meth:`Schedule.check`; ``tests/core/test_schedules.py`` checks it against torch's own
  constructors on a grid): ``"any"``, ``"at_least_stages"`` (M >= G, as mcap always asked
  of 1F1B), ``"rounds"`` (M a multiple of max(1, M // G): the interleaved "flex" rule),
  ``"at_least_virtual_stages"`` (M >= G·V, DualPipeV).

A partitioning under a schedule is L layers cut into G·V *chunks* (torch's stages); the
balance has G·V entries and rank r holds the chunks :meth:`Schedule.placement` gives. The
order in which each rank runs its chunks' forwards and backwards is the schedule's action
list (:mod:`mcap.core.schedules.actions`), which only torch produces
(``mcap.runner.orders``): no formula per schedule is written here.
"""
from __future__ import annotations

from typing import ClassVar, Optional

from mcap.core.errors import McapError
from mcap.core.registry import Registry

MAX_VIRTUAL = 64  # stages per rank: more is not a pipeline anyone runs (and bounds the work)


class Schedule:
    """Base class (module docstring): name, label, help, ``torch_class`` and the flags."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    torch_class: ClassVar[str] = ""
    stages_per_rank: ClassVar[str] = "one"   # "one" | "many" | "two"
    placement_style: ClassVar[str] = "loop"  # "loop" | "v"
    split_backward: ClassVar[bool] = False
    microbatch_rule: ClassVar[str] = "any"
    default_virtual: ClassVar[int] = 1
    color: ClassVar[str] = "#1f77b4"

    @property
    def multi(self) -> bool:
        """Whether torch runs it as a multi-stage schedule (PipelineScheduleMulti)."""
        return self.stages_per_rank != "one"

    def virtual(self, given: Optional[int]) -> int:
        """Stages per rank for a ``--virtual-stages`` value (None: not given), or McapError."""
        if self.stages_per_rank == "one":
            if given not in (None, 1):
                raise McapError(f"schedule {self.name} runs one stage per rank; "
                                f"--virtual-stages {given} applies only to "
                                f"{', '.join(names(stages_per_rank='many'))}")
            return 1
        if self.stages_per_rank == "two":
            if given not in (None, 2):
                raise McapError(f"schedule {self.name} places two stages per rank in a V; "
                                f"--virtual-stages must be 2 (or left out), got {given}")
            return 2
        v = self.default_virtual if given is None else given
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_VIRTUAL:
            raise McapError(f"--virtual-stages must be a whole number from 1 to {MAX_VIRTUAL}, "
                            f"got {given!r}")
        return v

    def virtual_from_form(self, asked: int) -> int:
        """Stages per rank from a form that always holds a number (the Profile page): the
        number where the schedule takes several, the schedule's own count otherwise."""
        return self.virtual(asked if self.stages_per_rank == "many" else None)

    def check(self, stages: int, virtual: int, chunks: int,
              num_layers: Optional[int] = None) -> None:
        """Refuse (McapError naming the rule) what torch's constructor would refuse, and V
        larger than the layers allow, before any process starts."""
        v = self.virtual(virtual)
        if num_layers is not None and stages * v > num_layers:
            raise McapError(f"schedule {self.name} with {stages} ranks x {v} stages per rank "
                            f"needs {stages * v} chunks of at least one layer, but the model "
                            f"has {num_layers} layers")
        rule = self.microbatch_rule
        if rule == "at_least_stages" and chunks < stages:
            raise McapError(f"schedule {self.name} needs at least as many micro-batches as "
                            f"stages: chunks {chunks} < stages {stages}")
        if rule == "at_least_virtual_stages" and chunks < stages * v:
            raise McapError(f"schedule {self.name} needs at least as many micro-batches as "
                            f"pipeline stages (ranks x 2): chunks {chunks} < {stages * v}")
        if rule == "rounds":
            rounds = max(1, chunks // stages)
            if chunks % rounds:
                raise McapError(f"schedule {self.name} needs the micro-batches to be a multiple "
                                f"of the rounds max(1, chunks // stages) = {rounds}: chunks "
                                f"{chunks} with stages {stages}")

    def placement(self, stages: int, virtual: int) -> tuple[tuple[int, ...], ...]:
        """The chunks (torch's stage indices) each rank holds, in stage order."""
        v = self.virtual(virtual)
        if self.placement_style == "v":
            return tuple(tuple(sorted((r, 2 * stages - 1 - r))) for r in range(stages))
        return tuple(tuple(r + stages * k for k in range(v)) for r in range(stages))


REGISTRY: Registry[Schedule] = Registry("schedule")
register, get = REGISTRY.register, REGISTRY.get

DEFAULT = "gpipe"


def names(**flags) -> tuple[str, ...]:
    """Registered schedule names, optionally those whose flags have the given values."""
    for flag in flags:
        if not hasattr(Schedule, flag):
            raise McapError(f"schedules have no capability {flag!r}")
    return tuple(s.name for s in REGISTRY
                 if all(getattr(s, flag) == value for flag, value in flags.items()))


def rank_of_chunks(schedule: str, stages: int, virtual: int) -> tuple[int, ...]:
    """For every chunk (stage index 0..G·V-1), the rank that holds it."""
    out = [0] * (stages * get(schedule).virtual(virtual))
    for rank, chunks in enumerate(get(schedule).placement(stages, virtual)):
        for c in chunks:
            out[c] = rank
    return tuple(out)
