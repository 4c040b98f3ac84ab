"""The schedule registry and the one action list (issue 39, items 1 and 3).

The action lists here come from torch (``mcap.runner.orders``: torch's own classes, built
over stand-in stages, or their step loops traced), so these tests import torch; the pure
parts they check (``mcap.core.schedules``) do not."""
import itertools

import pytest

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.schedules import actions as A
from mcap.core.stagetime import op_order
from mcap.runner import orders

ALL = schedules.names()


def test_the_seven_torch_schedules_are_registered_with_their_flags():
    assert ALL == ("gpipe", "1f1b", "interleaved-1f1b", "looped-bfs", "interleaved-zb",
                   "zbv", "dualpipev")
    assert schedules.names(stages_per_rank="two") == ("zbv", "dualpipev")
    assert schedules.names(split_backward=True) == ("interleaved-zb", "zbv", "dualpipev")
    for s in schedules.REGISTRY:
        assert s.label and s.help and s.torch_class


@pytest.mark.parametrize("name", ALL)
def test_the_rules_on_micro_batches_are_torchs(name):
    """What the registry refuses is exactly what torch's constructor refuses, on a grid."""
    spec = schedules.get(name)
    vs = (1, 2, 3) if spec.stages_per_rank == "many" else (spec.virtual(None),)
    for g, v, m in itertools.product(range(1, 6), vs, range(1, 13)):
        try:
            spec.check(g, v, m)
            ours = None
        except McapError as exc:
            ours = str(exc)
        try:
            orders.generate.__wrapped__(name, g, v, m)
            theirs = None
        except McapError as exc:
            theirs = str(exc)
        assert (ours is None) == (theirs is None), (g, v, m, ours, theirs)


def test_bad_virtual_stages_name_the_rule():
    with pytest.raises(McapError, match="runs one stage per rank"):
        schedules.get("1f1b").virtual(2)
    with pytest.raises(McapError, match="must be 2"):
        schedules.get("zbv").virtual(3)
    with pytest.raises(McapError, match="needs 12 chunks.*has 8 layers"):
        schedules.get("interleaved-1f1b").check(4, 3, 4, num_layers=8)
    with pytest.raises(McapError, match="DualPipeV|micro-batches as pipeline stages"):
        schedules.get("dualpipev").check(4, 2, 4)
    with pytest.raises(McapError, match="unknown schedule 'pipedream'.*gpipe, 1f1b"):
        schedules.get("pipedream")


def test_a_forms_number_is_the_stages_per_rank_only_where_the_schedule_takes_several():
    assert schedules.get("interleaved-1f1b").virtual_from_form(3) == 3
    assert schedules.get("1f1b").virtual_from_form(3) == 1
    assert schedules.get("zbv").virtual_from_form(3) == 2
    with pytest.raises(McapError, match="from 1 to"):
        schedules.get("looped-bfs").virtual_from_form(0)


@pytest.mark.parametrize("name", ALL)
def test_every_list_runs_each_micro_batch_once_per_chunk_and_never_deadlocks(name):
    for g, m in ((1, 4), (2, 4), (4, 8), (3, 6)):
        spec = schedules.get(name)
        try:
            spec.check(g, spec.virtual(None), m)
        except McapError:
            continue
        al = orders.generate(name, g, None, m)  # A.check ran on it
        timed = A.replay(al)
        assert len(timed) == sum(len(al.actions(r)) for r in range(g))
        assert A.from_dict(A.to_dict(al)) == al


def test_placement_is_torchs():
    """Interleaved: r, r+G, ...; V-shaped: r and 2G-1-r (generate checks torch's mapping)."""
    assert orders.generate("interleaved-1f1b", 4, 2, 8).placement == ((0, 4), (1, 5), (2, 6),
                                                                      (3, 7))
    assert orders.generate("zbv", 3, None, 6).placement == ((0, 5), (1, 4), (2, 3))
    assert schedules.rank_of_chunks("dualpipev", 2, 2) == (0, 1, 1, 0)


@pytest.mark.parametrize("g,m", [(1, 1), (2, 4), (3, 3), (4, 8), (4, 5)])
def test_the_one_stage_schedules_list_what_their_loops_run(g, m):
    """GPipe and 1F1B are traced off torch's own step loops; their order is the one mcap's
    stage-time replay used so far (stagetime.op_order) and their in-flight counts the closed
    form the teaching view used (GPipe all M, 1F1B min(G - i, M)), now both read off the
    list."""
    for name in ("gpipe", "1f1b"):
        if name == "1f1b" and m < g:
            continue
        al = orders.generate(name, g, None, m)
        assert [[(a.kind, a.microbatch) for a in al.actions(r)] for r in range(g)] == \
            op_order(name, g, m)
        assert tuple(x[0] for x in A.max_in_flight(al)) == _closed_form_in_flight(name, g, m)


def _closed_form_in_flight(name, g, m):
    return tuple(m if name == "gpipe" else min(g - i, m) for i in range(g))


def test_torchs_own_description_of_1f1b_is_not_what_it_runs():
    """Why the one-stage schedules are traced: in torch 2.13 ``Schedule1F1B.pipeline_order``
    lists forwards 1..M for the last rank, while its loop runs 0..M-1."""
    cls = orders.torch_class("1f1b")
    described = orders.order_of(cls(orders._stand_in(0, 4, 4), 8, loss_fn=None)) \
        if hasattr(cls(orders._stand_in(0, 4, 4), 8, loss_fn=None), "pipeline_order_with_comms") \
        else {r: [str(a) for a in acts if a is not None]
              for r, acts in cls(orders._stand_in(0, 4, 4), 8,
                                 loss_fn=None).pipeline_order.items()}
    ran = orders.generate("1f1b", 4, None, 8)
    assert "3F8" in described[3] or "3F8" in " ".join(map(str, described[3]))
    assert "3F8" not in ran.text(3) and ran.text(3).startswith("3F0 3B0")


def test_in_flight_counts_differ_by_schedule_as_the_papers_say():
    """Interleaved warm-up is (v-1)*mpr + 2*(P-1-rank) chunk-forwards (the issue's
    formula), and the steady 1F1B phase then starts with one more forward: read off the
    list, rank 0 of 4 with V=2 and 8 micro-batches runs 11 forwards before its first
    backward; it holds more than 1F1B's rank 0 does, and zero bubble keeps what W needs."""
    il = orders.generate("interleaved-1f1b", 4, 2, 8)
    warm = 0
    for a in il.actions(0):
        if a.kind != "F":
            break
        warm += 1
    assert warm == (2 - 1) * 4 + 2 * (4 - 1 - 0) + 1
    assert A.max_held(il)[0] > A.max_held(orders.generate("1f1b", 4, None, 8))[0]
    zb = orders.generate("interleaved-zb", 4, 2, 8)
    assert any(sum(e.inputs_done) for e in A.rank_events(zb, 0))


def test_the_single_stage_loops_release_points_are_traced():
    """1F1B lets go of a forward's send at a later exchange; GPipe keeps them to the end."""
    g = orders.generate("gpipe", 3, None, 4)
    n = len(g.actions(1))
    assert {after for k, c, m, after in g.releases[1] if k in "FB"} == {n}
    f = orders.generate("1f1b", 3, None, 4)
    assert min(after for k, c, m, after in f.releases[0] if k == "F") < len(f.actions(0))
    assert orders.generate("interleaved-1f1b", 2, 2, 4).releases == ()


def test_parse_refuses_what_is_not_an_action():
    with pytest.raises(McapError, match="not a schedule action"):
        A.parse_slot("0X3")
    assert A.parse_slot("3RECV_F2") == ()
    assert A.parse_slot("(0F7;7B3)OVERLAP_F_B") == (A.Action(0, "F", 7), A.Action(7, "B", 3))
    with pytest.raises(McapError, match="lacks a forward or a backward"):
        A.from_texts("gpipe", 1, 1, 2, {0: ["0F0", "0B0"]}, [(0,)])


def test_the_child_process_gives_the_same_list():
    """Processes that must not import torch (the dashboard server) get the lists from
    ``python -m mcap.runner.orders``; the same lists."""
    import json
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-m", "mcap.runner.orders", "zbv", "2", "2", "4",
                          "2", "2", "5"], capture_output=True, text=True, check=True).stdout
    got = [A.from_dict(d) for d in json.loads(out)]
    assert got == [orders.generate("zbv", 2, 2, 4), orders.generate("zbv", 2, 2, 5)]
