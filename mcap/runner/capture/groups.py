"""Where each device of a hybrid plan sits and the process groups it computes in: its stage,
its index within the stage, the stage's sub-group and DeviceMesh (engine ``hybrid``,
:mod:`mcap.runner.capture.device`)."""
from __future__ import annotations

import contextlib
import itertools
from dataclasses import dataclass
from typing import Optional

import torch.distributed as dist

from mcap.core.capture.plan import HybridPlan, StageConfig, as_plan
from mcap.runner import alone as alone_mod
from mcap.runner import memtrack


@dataclass(frozen=True)
class Place:
    """Where device ``rank`` sits in a plan."""
    stage: int
    local: int      # index of this device within its stage
    start: int      # global rank of the stage's device 0
    config: StageConfig


def places(plan: HybridPlan) -> list[Place]:
    out, start = [], 0
    for i, s in enumerate(plan.stages):
        out += [Place(i, j, start, s) for j in range(s.degree)]
        start += s.degree
    return out


def stage_group(groups: dict, plan: HybridPlan, stage: int, backend: Optional[str]):
    """The sub-group of a stage's devices (None for one device). ``new_group`` is
    collective over the whole world, so every rank creates every stage's group, in stage
    order; groups are kept for later runs (a group costs a rendezvous, no tensor memory)."""
    mine = None
    start = 0
    for i, s in enumerate(plan.stages):
        ranks = tuple(range(start, start + s.degree))
        start += s.degree
        if s.degree == 1:
            continue
        if ranks not in groups:
            groups[ranks] = dist.new_group(list(ranks), backend=backend)
        if i == stage:
            mine = groups[ranks]
    return mine


def join_groups(groups: dict, plan) -> None:
    """Create every stage sub-group of ``plan`` from a rank that runs none of its devices
    (under torchrun a plan may use fewer devices than there are ranks,
    ``mcap.runner.spmdrunner``): ``new_group`` is collective over the whole world."""
    stage_group(groups, as_plan(plan), -1, None)


def device_mesh(groups: dict, group, device_type: str):
    """The stage's DeviceMesh, made once per sub-group, kept and uncounted (as the process
    group is): it holds a small tensor (8 bytes seen) that would otherwise count in every
    later run of this process, whatever stage it runs.

    A process that runs devices alone joins a new fake world for each rank it runs
    (:func:`run_device`), and its sub-groups are made again with new names. DTensor caches
    sharding decisions per mesh for the process's life (sharding propagation,
    redistribution plans), and meshes compare equal by their ranks, layout, device type,
    dimension names and thread, not by their groups: a mesh of the same ranks in the next
    world was served the cached mesh of the last, whose group name no longer existed
    ("Could not resolve the process group registered under the name 2", on one slot
    running ``2:tp2,2:tp2`` then ``1,1,2:tp2``), or could have named another group of
    another size. So each world's meshes get a dimension name of their own
    (``groups["world_id"]``, set where a world is joined); a name changes no tensor."""
    from torch.distributed.device_mesh import DeviceMesh
    key = ("mesh", id(group), device_type)
    if key not in groups:
        world = groups.get("world_id")
        names = None if world is None else (f"world{world}",)
        with memtrack.suspended() if memtrack.installed() else contextlib.nullcontext():
            groups[key] = DeviceMesh.from_group(group, device_type, mesh_dim_names=names)
    return groups[key]


_WORLDS = itertools.count()  # fake worlds this process joined (device_mesh)


def join_world(groups: dict, plan: HybridPlan, rank: int) -> None:
    """Join the fake default group of ``plan``'s devices as ``rank`` (a device run alone,
    :mod:`mcap.runner.alone`). A new fake world drops the groups and meshes of the last one
    (they are gone with it) and gives its meshes a name of their own (:func:`device_mesh`)."""
    world = (rank, plan.devices)
    if groups.get("alone") != world:  # another fake world: its groups are gone with it
        groups.clear()
        groups["world_id"] = next(_WORLDS)  # its meshes' own name (device_mesh)
    alone_mod.join(rank, plan.devices)
    groups["alone"] = world


def plan_bounds(plan: HybridPlan) -> list[tuple[int, int]]:
    out, first = [], 0
    for s in plan.stages:
        out.append((first, first + s.layers - 1))
        first += s.layers
    return out
