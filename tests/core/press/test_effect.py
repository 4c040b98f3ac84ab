"""A plan's effect over one iteration (mcap.core.press.effect) and its place on the Explained
page: what leaves a device and returns when, and the memory curve with and without the plan."""
import pytest
from streamlit.testing.v1 import AppTest

from mcap.core.errors import McapError
from mcap.core.press import problem, solve
from mcap.core.press.effect import effect
from mcap.core.press.actions import LayerAction
from mcap.core.press import problem_from
from mcap.core.timeline import StageMemory, simulate
from mcap.runner.orders import generate
from mcap.store import Store
from tests.conftest import APP, PRESS_BAL, press_capacities, press_profile

BAL = PRESS_BAL
CAP = press_capacities()[0]
MiB = 2**20


def _toy():
    p = problem_from("toy", (2, 2), (100 * MiB, 60 * MiB), "gpipe", 3, [10 * MiB, 6 * MiB, 4 * MiB,
                     2 * MiB], [0.01, 0.03, 0.02, 0.02], 1e9, 1e9)
    tl = simulate(generate("gpipe", 2, 1, 3), (2, 2), (StageMemory(40 * MiB, 20 * MiB), StageMemory(30 * MiB, 10 * MiB)))
    return p, tl


def test_every_reduced_layer_leaves_in_its_forward_and_returns_in_its_backward():
    p, tl = _toy()
    acts = [LayerAction(0, "swap"), LayerAction(1, "d2d", 1), LayerAction(2), LayerAction(3)]
    e = effect(p, acts, tl, 0)
    ops = {(o.kind, o.microbatch): (o.start, o.end) for o in tl.ops if o.device == 0}
    assert len(e.events) == 2 * 2 * 3  # two reduced layers, 3 micro-batches, out and back
    for ev in e.events:
        kind = "F" if ev.nbytes < 0 else "B"
        a, z = ops[(kind, ev.microbatch)]
        assert a <= ev.time <= z
    # layer 0 runs first: it leaves before layer 1 in a forward, returns after it in backward
    t = {(ev.layer, ev.what): ev.time for ev in e.events if ev.microbatch == 0}
    assert t[(0, "swap out")] < t[(1, "d2d out")] and t[(0, "swap in")] > t[(1, "d2d in")]
    assert all(w <= wo for w, wo in zip(e.with_plan, e.without))
    assert max(e.with_plan) < max(e.without)
    # the d2d target holds the bytes while they are away from stage 0
    f = effect(p, acts, tl, 1)
    assert {ev.what for ev in f.events} == {"held for stage 0", "given back to stage 0"}
    assert max(f.with_plan) > max(f.without)
    assert sum(ev.nbytes for ev in f.events) == 0


def test_refuses_a_timeline_of_another_balance():
    p, _ = _toy()
    tl = simulate(generate("gpipe", 2, 1, 3), (1, 3), (StageMemory(1, 1), StageMemory(1, 1)))
    with pytest.raises(McapError, match="balance 1,3"):
        effect(p, [LayerAction(l) for l in range(4)], tl, 0)
    with pytest.raises(McapError, match="stage 5"):
        effect(p, [LayerAction(l) for l in range(4)], _toy()[1], 5)


@pytest.mark.app
def test_explained_page_shows_the_plan_over_the_iteration(tmp_store):
    from tests.conftest import warm_orders
    warm_orders()
    path = tmp_store
    s = Store(path)
    prof = press_profile()
    pid = s.save_profile(prof, name="vgg11 press")
    s.close()
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["profile"] = f"store:profile:{pid}"
    at.query_params["balance"] = BAL
    at.run()
    at.switch_page("pages/explained.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    at.number_input(key="tl-press-capacity").set_value(round(CAP / 2**20, 2)).run()
    assert not at.error, [e.value for e in at.error]
    device = at.selectbox(key="tl-press-device").value
    p = problem(prof, tuple(int(n) for n in BAL.split(",")))
    assert device == max(range(p.stages), key=lambda s: p.base[s])
    charts = [c for c in at.get("plotly_chart") if "memory without and with the plan" in c.proto.spec]
    assert len(charts) == 1 and "with the plan" in charts[0].proto.spec
    table = next(d.value for d in at.dataframe if "event" in d.value.columns)
    cap = int(round(CAP / 2**20, 2) * 2**20)
    plan = solve(problem(prof, p.balance, cap), cap, "mpress")
    reduced = [a for a in plan.stages[device] if a.action != "keep"]
    leaving = table[table["event"].isin(["dropped", "swap out", "d2d out"])]
    assert len(leaving) == len(reduced) * prof.setup.chunks and (leaving.filter(like="bytes").iloc[:, 0] < 0).all()
    # another device: its own events (or none), never an error
    at.selectbox(key="tl-press-device").set_value((device + 1) % p.stages).run()
    assert not at.exception and not at.error
