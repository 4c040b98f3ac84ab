"""The teaching view's pipeline simulation (mcap.core.timeline): one iteration drawn from the
schedule's own action list (torch's, ``mcap.runner.orders``), never from a formula per
schedule (issue 40, "one action list for teaching")."""
import pytest
from hypothesis import given, settings, strategies as st

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.schedules import actions as A
from mcap.core.timeline import StageMemory, simulate, stage_memory
from mcap.runner.orders import generate

FLAT = tuple(StageMemory(static=100, per_microbatch=10) for _ in range(8))


def _valid(name, g, m):
    spec = schedules.get(name)
    v = spec.virtual(None)
    try:
        spec.check(g, v, m)
    except McapError:
        return None
    return v


def test_1f1b_stage_i_holds_g_minus_i_microbatches():
    t = simulate(generate("1f1b", 4, 1, 8), (3, 3, 5, 19), FLAT[:4])
    assert t.max_in_flight == (4, 3, 2, 1)
    assert t.peaks == (140, 130, 120, 110)


def test_gpipe_every_stage_holds_all_microbatches():
    t = simulate(generate("gpipe", 4, 1, 4), (3, 3, 5, 19), FLAT[:4])
    assert t.max_in_flight == (4, 4, 4, 4)
    # first stage: forwards at steps 0..3, so micro-batches pile up one per step
    assert [len(h) for h in t.held[0][:4]] == [1, 2, 3, 4]
    assert t.memory[0][:4] == (110, 120, 130, 140)


def test_gpipe_runs_its_backwards_in_torchs_order():
    """torch's ScheduleGPipe runs the backwards in micro-batch order 0..M-1 (the old view drew
    them reversed): B0 first on the last stage, then on the first."""
    t = simulate(generate("gpipe", 2, 1, 2), (1, 1), FLAT[:2])
    got = [(o.device, o.kind, o.microbatch, o.start, o.end) for o in t.ops]
    assert got == [
        (0, "F", 0, 0, 1), (0, "F", 1, 1, 2), (1, "F", 0, 1, 2), (1, "F", 1, 2, 3),
        (1, "B", 0, 3, 5), (0, "B", 0, 5, 7), (1, "B", 1, 5, 7), (0, "B", 1, 7, 9),
    ]
    assert t.steps == 9
    assert t.held[0][8] == ((0, 1),) and t.held[1][6] == ((1, 1),) and t.held[1][7] == ()


@pytest.mark.parametrize("name", schedules.names())
def test_every_schedule_is_the_action_list_in_time(name):
    """Every registered schedule: each action of the list once, in the list's order on its
    device, never two at once; held counts equal the list's own (actions.max_held), and at
    each action's start what a chunk holds is what rank_events says it holds."""
    g, m = 4, 8
    v = _valid(name, g, m)
    al = generate(name, g, v, m)
    n = al.num_chunks
    t = simulate(al, (1,) * n, (StageMemory(0, 1),) * n)
    assert t.max_in_flight == A.max_held(al)
    assert t.peaks == A.max_held(al)  # one byte per micro-batch held
    for d in range(g):
        mine = sorted((o for o in t.ops if o.device == d), key=lambda o: o.start)
        assert [(o.chunk, o.kind, o.microbatch) for o in mine] == \
            [(a.stage, a.kind, a.microbatch) for a in al.actions(d)]
        assert all(a.end <= b.start for a, b in zip(mine, mine[1:]))
        for o, e in zip(mine, A.rank_events(al, d)):
            for i, c in enumerate(al.placement[d]):
                held = [p for p in t.held[d][o.start] if p[0] == c]
                count = e.forwarded[i] + e.inputs_done[i] + (o.kind == "F" and o.chunk == c)
                assert len(held) == count, (name, d, o)
        assert all(h == () for h in t.held[d][max(o.end for o in mine):])
    if schedules.get(name).split_backward and any(o.kind == "I" for o in t.ops):
        assert any(w for per in t.waiting for w in per)  # held after I, waiting for W


def test_stage_memory_calibrates_to_predicted_peak():
    params = (10, 20, 30, 40)
    sm = stage_memory((2, 2), params, (1000, 2000), generate("1f1b", 2, 1, 4))
    assert sm == (StageMemory(90, (1000 - 90) // 2, 30, 3), StageMemory(210, 2000 - 210, 70, 3))
    t = simulate(generate("1f1b", 2, 1, 4), (2, 2), sm)
    assert t.peaks == (90 + 2 * 455, 2000)


def test_stage_memory_and_simulate_refuse_with_the_values():
    with pytest.raises(McapError, match="balance sums to 4 but 3 layer sizes"):
        stage_memory((2, 2), (1, 2, 3), (5, 5), generate("gpipe", 2, 1, 4))
    with pytest.raises(McapError, match="calibrated on the profile's own schedule"):
        stage_memory((1,) * 4, (1,) * 4, (5,) * 4, generate("zbv", 2, 2, 4))
    with pytest.raises(McapError, match=r"balance \[2, 0\]"):
        simulate(generate("gpipe", 2, 1, 2), (2, 0), FLAT[:2])
    with pytest.raises(McapError, match="has 2 stages, but zbv with 2 devices x 2"):
        simulate(generate("zbv", 2, 2, 4), (1, 1), FLAT[:2])
    with pytest.raises(McapError, match="3 stage memory models given for 2 stages"):
        simulate(generate("gpipe", 2, 1, 2), (1, 1), FLAT[:3])
    with pytest.raises(McapError, match="a F takes 0 steps"):
        simulate(generate("gpipe", 2, 1, 2), (1, 1), FLAT[:2], durations={"F": 0})


def test_checkpointed_microbatches_keep_their_input_and_recompute_in_backward():
    """except_last: micro-batches 0..M-2 hold only their (unmeasured, 0) input while in flight
    and bring their activations back for the length of their backward; the last one keeps
    them from its forward to its backward, so under torch's GPipe order (B0 first) the level
    holds 2 micro-batches' activations: the last, kept, while B0 recomputes."""
    sm = (StageMemory(static=100, per_microbatch=10, recompute=10),) * 2
    t = simulate(generate("gpipe", 2, 1, 3), (1, 1), sm, checkpoint="except_last")
    assert [len(h) for h in t.held[0][:3]] == [1, 2, 3]
    assert t.memory[0][:2] == (100, 100)          # checkpointed forwards add nothing
    assert t.memory[0][2] == 110                  # the last micro-batch keeps its activations
    b0 = next(o for o in t.ops if o.device == 0 and o.kind == "B" and o.microbatch == 0)
    assert set(t.memory[0][b0.start:b0.end]) == {120}  # recomputed beside the kept last one
    assert t.peaks == (120, 120)
    always = simulate(generate("gpipe", 2, 1, 3), (1, 1), sm, checkpoint="always")
    assert always.memory[0][:3] == (100, 100, 100) and always.peaks == (110, 110)


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 5), chunks=st.integers(1, 8), schedule=st.sampled_from(["gpipe", "1f1b"]),
       checkpoint=st.sampled_from(["never", "always", "except_last"]),
       peaks=st.lists(st.integers(10**3, 10**9), min_size=5, max_size=5))
def test_calibration_gives_back_the_peaks_to_the_byte(stages, chunks, schedule, checkpoint, peaks):
    """At the setup the profile measured, the drawn peaks are the given ones exactly (the
    Explained page shows Predict's numbers)."""
    if schedule == "1f1b" and chunks < stages:
        schedule = "gpipe"  # torch's rule: 1F1B needs M >= G
    al = generate(schedule, stages, 1, chunks)
    balance = (2,) * stages
    params = tuple(range(1, 2 * stages + 1))
    sm = stage_memory(balance, params, tuple(peaks[:stages]), al, checkpoint=checkpoint)
    t = simulate(al, balance, sm, checkpoint=checkpoint)
    assert t.peaks == tuple(peaks[:stages])


def test_a_device_of_several_stages_sums_its_stages():
    al = generate("interleaved-1f1b", 2, 2, 4)
    sm = tuple(StageMemory(static=1000 * (c + 1), per_microbatch=c + 1) for c in range(4))
    t = simulate(al, (1,) * 4, sm)
    assert t.placement == ((0, 2), (1, 3))
    for d, chunks in enumerate(t.placement):
        for step, held in enumerate(t.held[d]):
            assert t.memory[d][step] == sum(sm[c].static for c in chunks) + \
                sum(sm[c].per_microbatch for c, _ in held)
