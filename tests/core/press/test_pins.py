"""Bytes a pipeline pins whatever the plan (MPress model, ``PressStats.boundaries``): the
profiler finds which layer owns each passed tensor, the model stops promising to free them
at stage boundaries and recompute-segment inputs, the MILP stays exact under it, and the
statistics survive the file (older files still load)."""
import dataclasses
import json

import pytest
import torch
from torch import nn

from mcap.core.errors import SchemaError
from mcap.core.press import outcome, problem_from, smallest_capacity, solve
from mcap.core.press.actions import LayerAction
from mcap.core.types import PressStats
from mcap.io import jsonio
from mcap.runner.press.stats import saved_and_boundaries
from tests.conftest import press_best, press_case_pins

MiB = 2**20
K = LayerAction


def test_profiler_names_the_owner_of_each_passed_tensor():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Tanh())
    x = torch.randn(3, 8, requires_grad=True)
    saved, bounds, shared = saved_and_boundaries(model, x)
    f = 4  # float32
    # Linear saves its input (the model's input: never counted), ReLU its output, the next
    # Linear the ReLU's output again (already owned by ReLU), Tanh its output.
    assert saved == [0, 3 * 16 * f, 0, 3 * 4 * f]
    assert bounds == ((), ((-1, 3 * 16 * f),), ((1, 3 * 16 * f),), ((-1, 3 * 4 * f),), ((3, 3 * 4 * f),))
    assert shared == ((1, 2, 3 * 16 * f),)  # the ReLU output the next Linear saves too


def _toy(bounds, balance=(2, 2), saved=(10 * MiB,) * 4, held_schedule="gpipe", chunks=2):
    return problem_from("toy", balance, (100 * MiB, 100 * MiB), held_schedule, chunks,
                        list(saved), [0.01] * len(saved), 1e9, 1e9, boundaries=bounds)


def test_stage_boundary_bytes_are_not_freed():
    # layer 1 owns the tensor passed to stage 1 (boundary 2): 4 MiB of its 10 stay
    # (the pipeline holds stage 0's output); layer 2 owns 3 MiB of stage 1's input
    bounds = ((), (), ((1, 4 * MiB), (2, 3 * MiB)), (), ())
    p, plain = _toy(bounds), _toy(())
    assert p.movable(1) == 6 * MiB and p.movable(2) == 7 * MiB and p.movable(0) == 10 * MiB
    acts = [K(0), K(1, "swap"), K(2, "swap"), K(3)]
    o, q = outcome(p, acts), outcome(plain, acts)
    assert o.freed[0]["swap"] == 2 * 6 * MiB and o.freed[1]["swap"] == 2 * 7 * MiB
    assert o.peaks[0] - q.peaks[0] == 2 * 4 * MiB - 4 * MiB  # held x pinned, less transient
    # a d2d target receives only what moves
    o = outcome(p, [K(0), K(1, "d2d", 1), K(2), K(3)])
    assert o.received[1] == 2 * 6 * MiB


def test_recompute_segment_keeps_its_input():
    # boundary 1 (layer 0 -> 1) owned by layer 0 (a ReLU's output): a segment starting at 1
    # holds it, so swapping layer 0 there frees nothing of it
    bounds = ((), ((0, 4 * MiB),), (), (), ())
    p = _toy(bounds)
    seg = outcome(p, [K(0, "swap"), K(1, "recompute"), K(2), K(3)])
    alone = outcome(p, [K(0, "swap"), K(1), K(2), K(3)])
    assert seg.pinned[0] == 2 * 4 * MiB and alone.pinned[0] == 0
    # one segment over both layers drops it: nothing pinned
    both = outcome(p, [K(0, "recompute"), K(1, "recompute"), K(2), K(3)])
    assert both.pinned[0] == 0


def test_recomputing_a_shared_storage_frees_it_only_with_every_saver():
    # VGG's relu (layer 1) owns its output, which the pooling (layer 2) saves too; the
    # conv's output (boundary 1) is saved by no layer
    bounds = ((), ((-1, 5 * MiB),), ((1, 4 * MiB),), (), ())
    p = _toy(bounds, balance=(3, 1), saved=(2 * MiB, 4 * MiB, 1 * MiB, 10 * MiB))
    p = problem_from("toy", (3, 1), (100 * MiB, 100 * MiB), "gpipe", 2,
                     [2 * MiB, 4 * MiB, 1 * MiB, 10 * MiB], [0.01] * 4, 1e9, 1e9,
                     boundaries=bounds, shared=((1, 2, 4 * MiB),))
    relu = outcome(p, [K(0), K(1, "recompute"), K(2), K(3)])
    # the relu's output stays (the pool holds it) and the conv's output is kept by the
    # checkpoint: the stage's peak rises. At its highest moment (the relu's backward of the
    # first micro-batch) the checkpoint holds both micro-batches' conv outputs (2 x 5 MiB)
    # and the pool still holds the other micro-batch's relu output (1 x 4 MiB)
    assert relu.pinned[0] == 1 * 4 * MiB + 2 * 5 * MiB and relu.peaks[0] > p.base[0]
    both = outcome(p, [K(0), K(1, "recompute"), K(2, "recompute"), K(3)])
    assert both.pinned[0] == 2 * 5 * MiB  # only the segment's unsaved input
    swap = outcome(p, [K(0), K(1, "swap"), K(2), K(3)])
    assert swap.pinned[0] == 0 and swap.peaks[0] < p.base[0]


@pytest.mark.parametrize("seed", range(8))
def test_milp_is_exact_with_pins(seed):
    p, cap = press_case_pins(seed)
    best = press_best(p, cap)
    m, h = solve(p, cap, "milp"), solve(p, cap, "mpress")
    assert m.predicted_work_seconds == pytest.approx(best, abs=1e-6)
    assert h.predicted_work_seconds >= m.predicted_work_seconds - 1e-6
    for plan in (m, h):
        assert max(outcome(p, [a for st in plan.stages for a in st]).peaks) <= cap
    assert press_best(p, smallest_capacity(p) - 1) is None  # no plan fits below the floor
    assert max(outcome(p, [K(l, "swap") for l in range(5)]).peaks) <= smallest_capacity(p)


def test_boundaries_round_trip_and_older_files_load(tmp_path):
    p = jsonio.load_profile("data/vgg11-b8-never-cpu4-press.profile.json")
    assert p.press.boundaries[2] == ((1, 524288),) and (1, 2, 524288) in p.press.shared
    d = jsonio.to_dict(p)
    del d["press"]["boundaries"], d["press"]["shared"]  # a file written before they existed
    (tmp_path / "old.profile.json").write_text(json.dumps(d))
    old = jsonio.load_profile(tmp_path / "old.profile.json").press
    assert old.boundaries == () and old.shared == () and old.saved_bytes == p.press.saved_bytes
    n = p.model.num_layers
    bounds = tuple(((b - 1, 64),) if 0 < b <= n else () for b in range(n + 1))
    bounds = bounds[:2] + (((-1, 32), (1, 64)),) + bounds[3:]
    q = dataclasses.replace(p, press=dataclasses.replace(p.press, boundaries=bounds,
                                                         shared=((1, 3, 128),)))
    jsonio.save(q, tmp_path / "q.profile.json")
    assert jsonio.load_profile(tmp_path / "q.profile.json").press == q.press
    from mcap.store import Store
    with Store(tmp_path / "s.db") as s:
        assert s.load_profile(s.save_profile(q)).press == q.press
    d = jsonio.to_dict(q)
    d["press"]["boundaries"][3] = [[n, 64]]
    d["press"]["shared"] = [[2, 1, 64]]
    (tmp_path / "bad.profile.json").write_text(json.dumps(d))
    with pytest.raises(SchemaError, match=r"press.boundaries\[3\]\[0\]\[0\]"):
        jsonio.load_profile(tmp_path / "bad.profile.json")
