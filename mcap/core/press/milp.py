"""The exact plan: MPress's choice as a mixed-integer linear program (the MILP beside the
approximated search of III-D; ``torch.distributed._tools.sac_ilp`` is the single-device
form of the idea). Solved with PuLP's bundled CBC.

Variables: for every layer l of stage s, binaries keep, recompute, swap and d2d->t for
every other stage t, exactly one of them 1 (``red_l = 1 - keep_l``, ``mv_l = swap_l +
sum_t d2d_l->t``). ``model.outcome`` evaluates each stage at every event e of its iteration
(``events.py``: live[e, l] micro-batches of l held, j(e) the layer whose backward runs);
the MILP asks the same of every event:

    minimise   sum_l cost_l(action)            (+ 1e-7 s per reduced layer, 2e-7 per d2d:
                                               on ties keep, then spare the peers)
    subject to, for every stage s and event e of s:
        base_s - max(keep_s) + keep_s[e]
          - sum_{l in s} live[e,l] saved_l red_l
          + fwd_f(e)(swap) mv_f(e) + fwd_f(e)(recompute) recompute_f(e)  (during F(f): a
                                                               reduced layer's forward holds less)
          + back_j(e) mv_j(e) + sum_{(o,k): o < j(e) <= k} bytes_ok mv_o   (swapped back)
          + sum_{l < j(e)} saved_l R_l,j(e) + rback_j(e) recompute_j(e)   (a recompute
                                                               run back in B(j))
          + sum_{i,o} live[e,i] bytes_io P_io                 (segment pins)
          + sum_i live[e,i] segment_bytes S_i                 (a segment's RNG state copy;
                                                               S_i >= recompute_i - recompute_i-1)
          + sum_{(o,k)} live[e,k] bytes_ok (recompute_o - Y_ok)   (shared storages)
          + sum_{l not in s} held_{s(l)} saved_l d2d_{l->s}   <= capacity
    with  R_l,j >= sum_{t=l..j} recompute_t - (j - l),  R >= 0   (l .. j one recompute run)
          P_io >= recompute_i - recompute_i-1 - keep_o,   P >= 0  (a segment starting at i
                                                           pins what owner o passed into i)
          0 <= Y_ok <= recompute_m for m in o..k

(``saved`` is the movable part, ``Problem.movable``, ``back`` ``Problem.swapped_back``, ``rback`` ``Problem.recomputed_back``, ``fwd``
``Problem.forward_change``; o = -1, a tensor no layer saves,
drops the keep term). R, P and Y only appear on the left of a <=, so at the optimum they
are the products they stand for: the program is ``model.outcome`` exactly. Bytes enter the
solver in MiB; the plan it returns is checked in int bytes and solved again with a tighter
bound if rounding let a device over. PuLP writes the problem to a temporary file and runs
CBC as a child process: that is the solver's business, this module does no I/O itself.
"""
from __future__ import annotations

import warnings

from mcap.core.errors import McapError
from mcap.core.press.model import outcome, smallest_capacity, unreachable
from mcap.core.press.problems import Problem
from mcap.core.press.base import Planner, register
from mcap.core.press.actions import LayerAction

TIE = 1e-7       # seconds per reduced layer: among equal plans, change the fewest layers
SCALE = 1e3      # the objective in milliseconds, so TIE stays above CBC's tolerances
UNIT = 2.0**20   # bytes per solver unit
TIME_LIMIT = 60  # seconds; CBC solves the bundled models in well under one


def _solve(p: Problem, bound: float, time_limit: float):
    """Long because: it is one MILP formulation (the module docstring's program), whose
    variables (actions, recompute runs, segment and shared-storage pins) every event's
    memory constraint reads; split apart, each piece would only pass them all along.

    The actions of the least added work with every stage's peak at most ``bound`` (solver
    units), or (None, the solver's status)."""
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
    mv = [p.movable(l) for l in range(len(p.saved))]
    red = {l: 1 - x[l, "keep", None] for l in range(len(p.saved))}
    moved = {l: x[l, "swap", None] + pulp.lpSum(x[l, "d2d", t] for t in range(p.stages)
                                                if t != stage[l])
             for l in range(len(p.saved))}
    R = {}  # (l, j): layers l..j of one stage all recomputed
    for s in range(p.stages):
        mine = list(p.layers(s))
        for jj, j in enumerate(mine):
            R[j, j] = x[j, "recompute", None]
            for l in mine[:jj]:
                v = prob.add_variable(f"R_{l}_{j}", lowBound=0)
                prob += v >= pulp.lpSum(x[t, "recompute", None] for t in range(l, j + 1)) - (j - l)
                R[l, j] = v
    seg = {}  # local index of a segment start -> its pin terms (bytes in solver units)
    for i, pairs in enumerate(p.seg):
        for o, n in pairs:
            v = prob.add_variable(f"P_{i}_{'u' if o < 0 else o}", lowBound=0)
            prob += v >= x[i, "recompute", None] - x[i - 1, "recompute", None] \
                - (0 if o < 0 else x[o, "keep", None])
            seg.setdefault(i, []).append((n if o < 0 else min(n, mv[o])) / UNIT * v)
    if p.segment_bytes:  # every recompute segment keeps the RNG state (model._levels)
        for s in range(p.stages):
            mine = list(p.layers(s))
            for j, i in enumerate(mine):
                v = prob.add_variable(f"S_{i}", lowBound=0)
                prob += v >= x[i, "recompute", None] - (x[i - 1, "recompute", None] if j else 0)
                seg.setdefault(i, []).append(p.segment_bytes / UNIT * v)
    shared = []
    for o, k, n in p.shared:  # freed by recomputing o only with every saver up to k (model.py)
        y = prob.add_variable(f"Y_{o}_{k}", lowBound=0)
        for m in range(o, k + 1):
            prob += y <= x[m, "recompute", None]
        shared.append((o, k, min(n, mv[o]) / UNIT * (x[o, "recompute", None] - y)))
    for s in range(p.stages):
        ev = p.events[s]
        mine = list(p.layers(s))
        a = mine[0]
        top = int(ev.keep.max())
        peers = pulp.lpSum(p.held[stage[l]] * mv[l] / UNIT * x[l, "d2d", s]
                           for l in range(len(p.saved)) if stage[l] != s)
        for e in range(ev.size):
            live, j, f = ev.live[e], int(ev.at[e]), int(ev.fat[e])
            terms = [-(int(live[l - a]) * mv[l] / UNIT) * red[l] for l in mine if live[l - a] and mv[l]]
            if f >= 0:  # a reduced layer's own forward
                g = a + f
                for action in ("recompute", "swap"):
                    c = p.forward_change(g, action)
                    if c:
                        terms.append((c / UNIT) * (x[g, "recompute", None] if action == "recompute"
                                                   else moved[g]))
            if j >= 0:
                g = a + j  # B(g) runs: g's swapped bytes are back, and shared ones from later
                terms.append((p.swapped_back(g) / UNIT) * moved[g])
                terms += [(min(n, mv[o]) / UNIT) * moved[o] for o, k, n in p.shared
                          if o < g <= k]
                terms += [(mv[l] / UNIT) * R[l, g] for l in range(a, g) if mv[l]]
                terms.append((p.recomputed_back(g) / UNIT) * x[g, "recompute", None])
            for i, pin in seg.items():
                if a <= i <= mine[-1] and live[i - a]:
                    terms += [int(live[i - a]) * t for t in pin]
            for o, k, t in shared:
                if a <= o <= mine[-1] and live[k - a]:
                    terms.append(int(live[k - a]) * t)
            prob += ((p.base[s] - top + int(ev.keep[e])) / UNIT + pulp.lpSum(terms)
                     + peers) <= bound
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


@register
class Milp(Planner):
    name, label = "milp", "MILP (exact)"
    help = "exact MILP (PuLP's CBC): the least added time under the model"
    color = "#54a24b"

    def plan(self, p: Problem, capacity: int) -> list[LayerAction]:
        return plan(p, capacity)
