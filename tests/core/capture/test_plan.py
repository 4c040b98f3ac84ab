"""CAPTURE's hybrid plans (``mcap.core.capture.plan``): plan and mesh text, the placement rules
a plan must meet, the logarithmic degree fit, batch-size lines and the layer merger."""
import pytest

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.capture.plan import (
    MAX_DEVICES, StageConfig, batch_at_capacity, batch_line, check_plan, log_degree, merge_layers, parse_mesh, parse_plan,
)


def test_plan_text_round_trips_and_counts_devices():
    plan = parse_plan("3,3,10:tp2")
    assert plan.stages == (StageConfig(3), StageConfig(3), StageConfig(10, "tp", 2))
    assert plan.text == "3,3,10:tp2" and plan.devices == 4 and plan.balance == (3, 3, 10)
    assert plan.as_json()[2] == {"layers": 10, "parallel": "tp", "degree": 2}
    assert parse_plan("4:dp1").stages == (StageConfig(4),)  # 1-way is pipeline-only
    assert plan.device_stage() == (0, 1, 2, 2)


@pytest.mark.parametrize("text,message", [
    ("3,x,4", "stage 1 is 'x'"), ("3,0,4", "stage 1 has 0 layers"), ("3,4:pp2", "stage 1 is '4:pp2'"),
    ("3,4:tp0", "stage 1 has degree 0"), ("", "stage 0 is ''")])
def test_bad_plan_text_names_the_stage(text, message):
    with pytest.raises(InvalidPartitioning, match=message):
        parse_plan(text)


@pytest.mark.parametrize("text,message", [
    ("10:tp99999999999999999999", "degree 999999999999... \\(20 digits\\) is over every bound"),
    ("1" * 5000, "layer count 111111111111... \\(5000 digits\\)"),
    ("10:tp100000000", "degree 100000000, which is not a power of 2"),
    ("4:tp1000", "degree 1000, which is not a power of 2"), ("2,2:dp6", "stage 1 has degree 6"),
    ("10:tp131072", "degree 131,072; a plan has at most 65,536 devices"),
    ("1:tp32768,1:tp32768,1", "uses more than 65,536 devices \\(stages 0..2 already 65,537\\)"),
    (",".join(["1"] * 70000), "uses more than 65,536 devices")])
def test_plan_sizes_are_refused_when_parsed(text, message):
    """Degrees are powers of 2 and a plan has at most MAX_DEVICES devices, refused before
    anything is allocated (10:tp100000000 once asked for 10^8 per-device peaks)."""
    with pytest.raises(InvalidPartitioning, match=message) as err:
        parse_plan(text)
    assert len(str(err.value)) < 400  # a 5000-digit plan is not echoed whole
    assert parse_plan("10:tp65536").devices == MAX_DEVICES  # the bound itself is a plan


def test_mesh_sizes_are_refused_when_parsed():
    assert parse_mesh("256x256").devices == MAX_DEVICES
    with pytest.raises(McapError, match="mesh 1000x1000 has 1,000,000 devices; a mesh has at most"):
        parse_mesh("1000x1000")
    with pytest.raises(McapError, match=r"\(30 digits\) is over every bound"):
        parse_mesh("1x" + "9" * 30)


def test_plans_must_fit_the_model_and_the_mesh_naming_the_numbers():
    mesh = parse_mesh("2x4")
    assert check_plan(parse_plan("2,2,4:dp2,6:tp4"), 14, mesh)
    with pytest.raises(InvalidPartitioning, match="places 14 layers but the model has 15"):
        check_plan(parse_plan("2,2,4:dp2,6:tp4"), 15, mesh)
    with pytest.raises(InvalidPartitioning, match="uses 6 devices but mesh 2x4 has 8"):
        check_plan(parse_plan("2,2,4:dp2,6:tp2"), 14, mesh)
    with pytest.raises(InvalidPartitioning, match="would span nodes 0 and 1"):
        check_plan(parse_plan("2,2,2,4:dp2,4:dp2,2"), 16, mesh)
    with pytest.raises(InvalidPartitioning, match="degree 8 but a node of mesh 2x4 has 4"):
        check_plan(parse_plan("4:dp8"), 4, mesh)
    with pytest.raises(McapError, match="is not NxK"):
        parse_mesh("4")


def test_log_fit_goes_through_both_profiled_degrees_and_flattens():
    assert log_degree(100, 70, 2) == 100 and log_degree(100, 70, 4) == 70
    assert log_degree(100, 70, 8) == 40 and log_degree(100, 70, 16) == 10
    assert log_degree(100, 70, 8) - log_degree(100, 70, 16) == 30  # linear in log2(degree)


def test_batch_line_through_two_profiled_sizes():
    assert batch_line(100, 8, 160, 16, 32) == 280
    assert batch_line(100, 8, 160, 16, 8) == 100
    with pytest.raises(McapError, match="two different batch sizes"):
        batch_line(1, 8, 2, 8, 16)


def test_batch_at_capacity_inverts_the_batch_line():
    # 100 at 8, 160 at 16: 7.5 per sample; 280 is reached at 32
    assert batch_at_capacity(100, 8, 160, 16, 280) == 32
    assert batch_line(100, 8, 160, 16, batch_at_capacity(100, 8, 160, 16, 279)) <= 279
    assert batch_at_capacity(100, 8, 160, 16, 10) == 0      # not even 0 fits
    assert batch_at_capacity(100, 8, 100, 16, 280) is None  # a flat line never reaches it
    with pytest.raises(McapError, match="two different batch sizes"):
        batch_at_capacity(1, 8, 2, 8, 16)


def test_layer_merger_merges_the_pair_with_the_lowest_merged_isolated_memory():
    iso, added = (10, 50, 20, 30, 5), (None, 4, 6, -2, 1)
    sizes, miso, madded = merge_layers(iso, added, 3)
    # round 1: merged Mi = 10+4, 50+6, 20-2, 30+1 -> layers 0,1 (14); round 2: 14+6, 20-2, 30+1
    # -> layers 2,3 (18); left: [0,1], 2..3, 4
    assert sizes == (2, 2, 1) and sum(sizes) == 5
    assert miso == (14, 18, 5) and madded == (None, 6 - 2, 1)
    # a merged model predicts a stage the way the unmerged one does
    assert miso[0] + madded[1] == iso[0] + sum(added[1:4])
    with pytest.raises(McapError, match="--merge-to 0: the model has 5 layers"):
        merge_layers(iso, added, 0)
