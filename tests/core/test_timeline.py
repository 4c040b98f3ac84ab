"""The teaching view's pipeline simulation (mcap.core.timeline)."""
import pytest
from hypothesis import given, settings, strategies as st

from mcap.core.errors import McapError
from mcap.core.timeline import (
    StageMemory, max_in_flight, op_order, simulate, stage_memory,
)

FLAT = tuple(StageMemory(static=100, per_microbatch=10) for _ in range(4))


def test_1f1b_stage_i_holds_g_minus_i_microbatches():
    t = simulate((3, 3, 5, 19), "1f1b", chunks=8, stage_memory=FLAT)
    assert t.max_in_flight == (4, 3, 2, 1)
    assert t.peaks == (140, 130, 120, 110)


def test_gpipe_every_stage_holds_all_microbatches():
    t = simulate((3, 3, 5, 19), "gpipe", chunks=4, stage_memory=FLAT)
    assert t.max_in_flight == (4, 4, 4, 4)
    # first stage: forwards at steps 0..3, so micro-batches pile up one per step
    assert [len(h) for h in t.held[0][:4]] == [1, 2, 3, 4]
    assert t.memory[0][:4] == (110, 120, 130, 140)


def test_gpipe_op_times_follow_the_pipeline():
    t = simulate((1, 1), "gpipe", chunks=2, stage_memory=FLAT[:2], backward_steps=2)
    got = [(o.device, o.kind, o.microbatch, o.start, o.end) for o in t.ops]
    assert got == [
        (0, "F", 0, 0, 1), (0, "F", 1, 1, 2), (1, "F", 0, 1, 2), (1, "F", 1, 2, 3),
        (1, "B", 1, 3, 5), (0, "B", 1, 5, 7), (1, "B", 0, 5, 7), (0, "B", 0, 7, 9),
    ]
    assert t.steps == 9
    # memory falls back to the static level once the last backward is done
    assert t.held[0][8] == (0,) and t.held[1][6] == (0,) and t.held[1][7] == ()


def test_1f1b_order_has_warmup_steady_cooldown():
    assert op_order("1f1b", 0, 3, 4) == (("F", 0), ("F", 1), ("F", 2), ("B", 0), ("F", 3),
                                        ("B", 1), ("B", 2), ("B", 3))
    assert op_order("1f1b", 2, 3, 4) == (("F", 0), ("B", 0), ("F", 1), ("B", 1), ("F", 2),
                                        ("B", 2), ("F", 3), ("B", 3))


def test_fewer_chunks_than_stages_caps_in_flight():
    assert max_in_flight("1f1b", 4, 2) == (2, 2, 2, 1)
    t = simulate((1, 1, 1, 1), "1f1b", chunks=2, stage_memory=FLAT)
    assert t.max_in_flight == (2, 2, 2, 1)


@settings(max_examples=40, deadline=None)
@given(stages=st.integers(1, 6), chunks=st.integers(1, 9), schedule=st.sampled_from(["gpipe", "1f1b"]),
       bw=st.integers(1, 3))
def test_simulation_matches_closed_form_and_ends_empty(stages, chunks, schedule, bw):
    sm = tuple(StageMemory(0, 1) for _ in range(stages))
    t = simulate((1,) * stages, schedule, chunks, sm, backward_steps=bw)
    assert t.max_in_flight == max_in_flight(schedule, stages, chunks)
    assert len(t.ops) == 2 * stages * chunks
    # no device runs two ops at once
    for d in range(stages):
        spans = sorted((o.start, o.end) for o in t.ops if o.device == d)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # once a device's last backward is done it holds nothing
    for d in range(stages):
        last = max((o for o in t.ops if o.device == d), key=lambda o: o.end)
        assert t.held[d][last.end - 1] == (last.microbatch,)
        assert all(h == () for h in t.held[d][last.end:])


def test_stage_memory_calibrates_to_predicted_peak():
    params = (10, 20, 30, 40)
    sm = stage_memory((2, 2), params, predicted_peaks=(1000, 2000), profiled_schedule="1f1b", chunks=4)
    assert sm == (StageMemory(90, (1000 - 90) // 2, 30, 3), StageMemory(210, 2000 - 210, 70, 3))
    t = simulate((2, 2), "1f1b", 4, sm)
    assert t.peaks == (90 + 2 * 455, 2000)


def test_stage_memory_rejects_wrong_layer_count():
    with pytest.raises(McapError, match="balance sums to 4 but 3 layer sizes"):
        stage_memory((2, 2), (1, 2, 3), (5, 5), "gpipe", 4)


def test_bad_inputs_name_values():
    with pytest.raises(McapError, match="schedule 'zb' is not one of gpipe, 1f1b"):
        simulate((1, 1), "zb", 2, FLAT[:2])
    with pytest.raises(McapError, match=r"balance \[2, 0\]"):
        simulate((2, 0), "gpipe", 2, FLAT[:2])
    with pytest.raises(McapError, match="3 stage memory models given for 2 stages"):
        simulate((1, 1), "gpipe", 2, FLAT[:3])


def test_checkpointed_microbatches_keep_their_input_and_recompute_in_backward():
    """except_last: micro-batches 0..M-2 hold only their (unmeasured, 0) input while in flight
    and bring their activations back for the length of their backward; the last one keeps
    them from its forward to its backward."""
    sm = (StageMemory(static=100, per_microbatch=10, recompute=10),) * 2
    t = simulate((1, 1), "gpipe", 3, sm, checkpoint="except_last")
    assert [len(h) for h in t.held[0][:3]] == [1, 2, 3]
    assert t.memory[0][:2] == (100, 100)          # checkpointed forwards add nothing
    assert t.memory[0][2] == 110                  # the last micro-batch keeps its activations
    b1 = next(o for o in t.ops if o.device == 0 and o.kind == "B" and o.microbatch == 1)
    assert set(t.memory[0][b1.start:b1.end]) == {110}  # recomputed during its backward
    assert t.peaks == (110, 110)
    always = simulate((1, 1), "gpipe", 3, sm, checkpoint="always")
    assert always.memory[0][:3] == (100, 100, 100)


@settings(max_examples=60, deadline=None)
@given(stages=st.integers(1, 5), chunks=st.integers(1, 8), schedule=st.sampled_from(["gpipe", "1f1b"]),
       checkpoint=st.sampled_from(["never", "always", "except_last"]),
       peaks=st.lists(st.integers(10**3, 10**9), min_size=5, max_size=5))
def test_calibration_gives_back_the_peaks_to_the_byte(stages, chunks, schedule, checkpoint, peaks):
    """At the setup the profile measured, the drawn peaks are the given ones exactly (the
    Explained page shows Predict's numbers)."""
    balance = (2,) * stages
    params = tuple(range(1, 2 * stages + 1))
    sm = stage_memory(balance, params, tuple(peaks[:stages]), schedule, chunks, checkpoint=checkpoint)
    t = simulate(balance, schedule, chunks, sm, checkpoint=checkpoint)
    assert t.peaks == tuple(peaks[:stages])
