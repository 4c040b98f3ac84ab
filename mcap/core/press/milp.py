"""The exact plan: MPress's choice as a mixed-integer linear program (the MILP beside the
approximated search of III-D; ``torch.distributed._tools.sac_ilp`` is the single-device
form of the idea). Solved with PuLP's bundled CBC.

Variables: for every layer l of stage s, binaries keep, recompute, swap and d2d->t for
every other stage t, exactly one of them 1; for every stage a continuous transient T_s.

    minimise   sum_l cost_l(action)            (+ 1e-7 s per reduced layer, 2e-7 per d2d:
                                               on ties keep, then spare the peers)
    subject to T_s >= own_l * (1 - keep_l)                        for l in stage s
               T_s >= own_l (1 - keep_l) + saved_l-1 (1 - keep_l-1)     for adjacent l-1, l in s
               P_io >= recompute_i - recompute_i-1 - keep_o    (a segment starting at i pins
                                                                what owner o passed into i)
               base_s - held_s * sum_{l in s} saved_l (1 - keep_l) + T_s
                 + held_s * sum_{i,o} bytes_io P_io
                 + sum_{l not in s} held_{s(l)} saved_l d2d_{l->s}  <= capacity   per stage

(``saved`` is the movable part, ``Problem.movable``; ``own`` that or the measured backward
bytes, ``Problem.restored``; P_io >= 0 like T_s; o = -1, a tensor no
layer saves, drops the keep term; a storage o shares with later savers up to k adds
bytes (recompute_o - Y_ok) with 0 <= Y_ok <= recompute_m for m in o..k)

which is ``model.outcome`` exactly (the max of the transient is exact at the optimum
because T_s only appears on the left of a <=). Bytes enter the solver in MiB; the plan it
returns is checked in int bytes and solved again with a tighter bound if rounding let a
device over. PuLP writes the problem to a temporary file and runs CBC as a child process:
that is the solver's business, this module does no I/O itself.
"""
from __future__ import annotations

import warnings

from mcap.core.errors import McapError
from mcap.core.press.model import Problem, outcome, smallest_capacity, unreachable
from mcap.core.pressplan import LayerAction

TIE = 1e-7       # seconds per reduced layer: among equal plans, change the fewest layers
SCALE = 1e3      # the objective in milliseconds, so TIE stays above CBC's tolerances
UNIT = 2.0**20   # bytes per solver unit
TIME_LIMIT = 60  # seconds; CBC solves the bundled models in well under one


def _solve(p: Problem, bound: float, time_limit: float):
    try:
        import pulp
    except ImportError as exc:  # pragma: no cover - pulp is in requirements.txt
        raise McapError(f"method 'milp' needs PuLP (pip install pulp): {exc}") from None
    stage = p.stage_of()
    prob = pulp.LpProblem("mpress", pulp.LpMinimize)
    x = {}
    for l in range(len(p.saved)):
        s = stage[l]
        opts = [("keep", None), ("recompute", None), ("swap", None)] + \
               [("d2d", t) for t in range(p.stages) if t != s]
        for a, t in opts:
            x[l, a, t] = prob.add_variable(f"x_{l}_{a}_{'' if t is None else t}", cat="Binary")
        prob += pulp.lpSum(x[l, a, t] for a, t in opts) == 1
    T = [prob.add_variable(f"T_{s}", lowBound=0) for s in range(p.stages)]
    mv = [p.movable(l) for l in range(len(p.saved))]
    own = [p.restored(l) for l in range(len(p.saved))]
    for l in range(len(p.saved)):
        prob += T[stage[l]] >= (own[l] / UNIT) * (1 - x[l, "keep", None])
        if l > 0 and stage[l - 1] == stage[l]:  # two adjacent reduced layers (model.py)
            prob += T[stage[l]] >= (own[l] / UNIT) * (1 - x[l, "keep", None]) \
                + (mv[l - 1] / UNIT) * (1 - x[l - 1, "keep", None])
    pinned = [[] for _ in range(p.stages)]  # segment pins (model.py), exact at the optimum
    for i, pairs in enumerate(p.seg):
        for o, n in pairs:
            v = prob.add_variable(f"P_{i}_{'u' if o < 0 else o}", lowBound=0)
            prob += v >= x[i, "recompute", None] - x[i - 1, "recompute", None] \
                - (0 if o < 0 else x[o, "keep", None])
            pinned[stage[i]].append((n if o < 0 else min(n, mv[o])) / UNIT * v)
    for o, k, n in p.shared:  # freed by recomputing o only with every saver up to k (model.py)
        y = prob.add_variable(f"Y_{o}_{k}", lowBound=0)
        for m in range(o, k + 1):
            prob += y <= x[m, "recompute", None]
        pinned[stage[o]].append(min(n, mv[o]) / UNIT * (x[o, "recompute", None] - y))
    for s in range(p.stages):
        mine = p.layers(s)
        prob += (p.base[s] / UNIT
                 - pulp.lpSum(p.held[s] * mv[l] / UNIT * (1 - x[l, "keep", None]) for l in mine)
                 + T[s] + p.held[s] * pulp.lpSum(pinned[s])
                 + pulp.lpSum(p.held[stage[l]] * mv[l] / UNIT * x[l, "d2d", s]
                              for l in range(len(p.saved)) if stage[l] != s)) <= bound
    prob += pulp.lpSum(v * (0.0 if a == "keep" else SCALE * (p.costs[l][a] + TIE * (2 if a == "d2d" else 1)))
                       for (l, a, t), v in x.items())
    with warnings.catch_warnings():  # PuLP 3.3 marks its bundled CBC for removal in 4.0 (pinned)
        warnings.simplefilter("ignore", DeprecationWarning)
        status = prob.solve(pulp.PULP_CBC_CMD(msg=False, gapRel=0, timeLimit=time_limit))
    if pulp.LpStatus[status] != "Optimal":
        return None, pulp.LpStatus[status]
    acts = []
    for l in range(len(p.saved)):
        chosen = [(a, t) for (m, a, t), v in x.items() if m == l and (v.value() or 0) > 0.5]
        a, t = chosen[0]
        acts.append(LayerAction(l, a, t))
    return acts, "Optimal"


def plan(p: Problem, capacity: int, time_limit: float = TIME_LIMIT) -> list[LayerAction]:
    """The actions of least added time under ``capacity`` (exact, within CBC's tolerance)."""
    if smallest_capacity(p) > capacity:
        raise unreachable(p, capacity)
    bound = capacity / UNIT
    for _ in range(4):
        acts, status = _solve(p, bound, time_limit)
        if acts is None:
            raise McapError(f"the MILP found no plan under capacity {capacity:,} bytes "
                            f"(CBC status {status}); try --method mpress")
        over = max(outcome(p, acts).peaks) - capacity
        if over <= 0:
            return acts
        bound -= (over + 1) / UNIT  # rounding in MiB let a device over by a few bytes
    raise McapError(f"the MILP's plan stays {over:,} bytes over capacity {capacity:,} after "
                    "tightening; try --method mpress")
