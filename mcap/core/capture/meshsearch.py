"""The recommender on a mesh (CAPTURE III-C, Algorithm 4) and an exact dynamic programme
beside it. Pure.

Both search hybrid plans (``mcap.core.capture.plan``) of L layers on a mesh of N nodes x K
devices: stage configs with power-of-two degrees (pp with degree 1, dp and tp with 2, 4,
..., K), placed in layer order node by node, every node's degrees summing to K. A plan's
per-device peaks are its stages' per-device predicted peaks (a stage of degree d puts the
same peak on d devices). The best plan has the lexicographically smallest per-device
vector sorted high to low: the lowest peak, then drop the fullest devices and compare the
rest (the seed's tie-break; where the seed draws at random among equal plans, the
smallest plan in a fixed order wins, so results are reproducible).

Each search is registered (``MeshMethod``; ``recommend --mesh --method``, the Hybrid plans
page): ``exact`` (the DP, the default: exact and faster) and ``enumerate`` (Algorithm 4,
``prunes``: ``--no-prune`` places every config).

* :func:`enumerate_plans` is Algorithm 4 with its pruning: a stage config whose predicted
  peak already exceeds the best plan's peak is not placed.
* :func:`exact_plan` is a dynamic programme over (layers placed, devices used): merging the
  same stage into two partial vectors keeps their order (``mcap.core.search.exact`` has the
  argument), so keeping the best partial plan per state loses nothing. Time O(L^2 D C) for
  D devices and C configs, instead of the enumeration's exponential count.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, ClassVar, Optional

from mcap.core.errors import McapError
from mcap.core.registry import Registry
from mcap.core.capture.plan import HybridPlan, Mesh, StageConfig

# (first layer, last layer, parallelism, degree) -> predicted per-device peak (bytes)
StageCost = Callable[[int, int, str, int], int]


def configs(mesh: Mesh, kinds: tuple[str, ...] = ("dp", "tp")) -> list[tuple[str, int]]:
    """pp with degree 1 and every kind with degrees 2, 4, ... up to K (III-C: 2 log2 K - 1
    parallel configurations; 1-way dp/tp is pp)."""
    out = [("pp", 1)]
    d = 2
    while d <= mesh.per_node:
        out += [(k, d) for k in kinds]
        d *= 2
    return out


@dataclass(frozen=True)
class MeshResult:
    plan: HybridPlan
    peaks: tuple[int, ...]  # per device, in device order
    seconds: float
    explored: int  # plans completed (enumeration) or transitions (DP)

    @property
    def peak(self) -> int:
        return max(self.peaks)


def _key(vec: tuple[int, ...], plan: tuple) -> tuple:
    return (tuple(sorted(vec, reverse=True)), plan)


def _order(plan: tuple) -> tuple:
    return tuple((s.layers, s.parallel, s.degree) for s in plan)


def _check(L: int, mesh: Mesh) -> None:
    if L < mesh.nodes:
        raise McapError(f"{L} layers cannot fill mesh {mesh.text}: every node needs at least "
                        "one stage")


def _options(mesh: Mesh, kinds: tuple[str, ...], only) -> list[tuple[str, int]]:
    """The configs to place: ``configs(mesh, kinds)``, or those of them in ``only`` (the
    ones the caller can cost, e.g. dp2 but not dp4)."""
    opts = configs(mesh, kinds)
    return opts if only is None else [o for o in opts if o in set(only)]


def enumerate_plans(L: int, mesh: Mesh, cost: StageCost, prune: bool = True,
                    kinds: tuple[str, ...] = ("dp", "tp"), only=None) -> MeshResult:
    """Algorithm 4: every placement, with the seed's pruning when ``prune``; ``only``
    limits the (kind, degree) configs placed (pp is always placed)."""
    _check(L, mesh)
    started = time.perf_counter()
    K, D = mesh.per_node, mesh.devices
    opts = _options(mesh, kinds, only)
    best: list = [None, None, None]  # key, plan, vector
    explored = [0]

    def place(i: int, p: int, plan: list, vec: list) -> None:
        if i == L:
            if p == D:
                explored[0] += 1
                k = _key(tuple(vec), _order(plan))
                if best[0] is None or k < best[0]:
                    best[:] = [k, tuple(plan), tuple(vec)]
            return
        left = D - p
        if left == 0:
            return
        for j in range(i + 1, L + 1):
            for par, d in opts:
                if p % K + d > K or d > left:
                    continue
                remaining_devices = left - d
                if remaining_devices and L - j < -(-remaining_devices // K):
                    continue  # the other layers cannot fill the devices left
                if remaining_devices == 0 and j != L:
                    continue
                c = cost(i, j - 1, par, d)
                if prune and best[0] is not None and c > best[0][0][0]:
                    continue
                plan.append(StageConfig(j - i, par, d))
                vec.extend([c] * d)
                place(j, p + d, plan, vec)
                plan.pop()
                del vec[-d:]

    place(0, 0, [], [])
    if best[0] is None:
        raise McapError(f"no plan places {L} layers on mesh {mesh.text}")
    return MeshResult(HybridPlan(best[1]), best[2], time.perf_counter() - started, explored[0])


def exact_plan(L: int, mesh: Mesh, cost: StageCost,
               kinds: tuple[str, ...] = ("dp", "tp"), only=None) -> MeshResult:
    """The same optimum as :func:`enumerate_plans` by dynamic programming (module docstring)."""
    _check(L, mesh)
    started = time.perf_counter()
    K, D = mesh.per_node, mesh.devices
    opts = _options(mesh, kinds, only)
    # state (layers placed, devices used) -> (key, plan, per-device vector in device order)
    best: dict[tuple[int, int], tuple] = {(0, 0): (_key((), ()), (), ())}
    work = 0
    for p in range(D):
        for i in range(L):
            here = best.get((i, p))
            if here is None:
                continue
            _, plan, vec = here
            for par, d in opts:
                if p % K + d > K or p + d > D:
                    continue
                for j in range(i + 1, L + 1):
                    if (p + d == D) != (j == L):
                        continue
                    work += 1
                    c = cost(i, j - 1, par, d)
                    nplan = plan + (StageConfig(j - i, par, d),)
                    nvec = vec + (c,) * d
                    k = _key(nvec, _order(nplan))
                    old = best.get((j, p + d))
                    if old is None or k < old[0]:
                        best[(j, p + d)] = (k, nplan, nvec)
    final: Optional[tuple] = best.get((L, D))
    if final is None:
        raise McapError(f"no plan places {L} layers on mesh {mesh.text}")
    return MeshResult(HybridPlan(final[1]), final[2], time.perf_counter() - started, work)


# --- the registry of mesh searches ------------------------------------------------------

class MeshMethod:
    """A search of hybrid plans on a mesh (ARCHITECTURE.md, "Add a mesh search"). ``prunes``:
    it takes ``prune`` (``--no-prune`` turns it off); ``color``: its colour on every chart."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    color: ClassVar[str] = "#1f77b4"
    prunes: ClassVar[bool] = False

    def search(self, L: int, mesh: Mesh, cost: StageCost, *, prune: bool = True,
               kinds: tuple[str, ...] = ("dp", "tp"), only=None) -> MeshResult:
        raise NotImplementedError


REGISTRY: Registry[MeshMethod] = Registry("mesh method")
register, names, get = REGISTRY.register, REGISTRY.names, REGISTRY.get


@register
class Exact(MeshMethod):
    name, label = "exact", "exact (dynamic programme)"
    help = "the exact DP over (layers placed, devices used): the optimum, fast (the default)"
    color = "#2ca02c"

    def search(self, L, mesh, cost, *, prune=True, kinds=("dp", "tp"), only=None):
        return exact_plan(L, mesh, cost, kinds=kinds, only=only)


@register
class Enumerate(MeshMethod):
    name, label = "enumerate", "enumerate (Algorithm 4)"
    help = "CAPTURE's Algorithm 4: every placement, pruned by the best peak so far"
    color = "#9467bd"
    prunes = True

    def search(self, L, mesh, cost, *, prune=True, kinds=("dp", "tp"), only=None):
        return enumerate_plans(L, mesh, cost, prune=prune, kinds=kinds, only=only)
