"""mcap/app/ranks.py's Partition space part without torch or a child: why a sweep cannot be
read by a profile's op model (named values), and the metrics as the page writes them."""
from dataclasses import replace

import pytest

from mcap.app import ranks
from mcap.core.errors import McapError
from mcap.core.schedules.predict import RankEvaluation
from mcap.io.jsonio import load_profile, load_sweep
from tests.conftest import DATA

PROFILE = DATA / "schedules" / "vgg11-i32-h128-cpu2-zb.profile.json"
SWEEP = DATA / "schedules" / "vgg11-i32-h128-cpu2-interleaved-zb.sweep.json"
GPT = DATA / "schedules" / "gpt2-l8-h128-s64-cpu2-zbv.sweep.json"


def _never(*args):
    raise AssertionError("no action list is needed to refuse this sweep")


@pytest.fixture(scope="module")
def profile():
    return load_profile(PROFILE)


def test_another_model_or_setup_is_named_before_any_action_list(profile, monkeypatch):
    monkeypatch.setattr(ranks, "actions", _never)
    why = ranks.sweep_mismatch(profile, None, load_sweep(GPT))
    assert why.startswith("the profile is of 'vgg11:") and "(30 layers)" in why
    assert "but the sweep of 'hf:gpt2:" in why
    sweep = load_sweep(SWEEP)
    other = replace(sweep, setup=replace(sweep.setup, batch_size=16, checkpoint="always"))
    why = ranks.sweep_mismatch(profile, None, other)
    assert "batch_size 8 vs 16" in why and "checkpoint 'never' vs 'always'" in why
    with pytest.raises(McapError, match="batch_size 8 vs 16"):
        ranks.check_sweep(profile, None, other)


def _check(pick_measured, pick_rank):
    ev = RankEvaluation("interleaved-zb", 2, 125, 248, 0.0, 0.0210204, 0.9663857, 129,
                        (13, 3, 2, 12), 77474152, pick_measured, pick_rank, (12, 3, 3, 12),
                        77957320, True)
    return ranks.SweepCheck(ranks.Target("interleaved-zb", 2), ev, ())


def test_metrics_as_the_page_writes_them():
    assert ranks.space_metrics(_check(None, None)) == {
        "devices compared": "248", "median |error|": "0.00%", "p90 |error|": "2.10%",
        "max |error|": "96.64%", "exact to the byte": "129 of 248"}
    assert ranks.pick_metrics(_check(None, None)) == {
        "op model's pick": "13-3-2-12", "its predicted peak": "73.89 MiB",
        "its measured peak": "not measured", "its measured rank": "not in this sweep"}
    got = ranks.pick_metrics(_check(77957320, 1))
    assert got["its measured peak"] == "74.35 MiB" and got["its measured rank"] == "1 of 125"
