"""Predict, Recommend and Partition space for a profile of a multi-chunk schedule (issue 39,
item 1: the pages): a zero-bubble profile of VGG11 (data/schedules) is predicted rank by rank
by the schedules' op model, with the measured peaks of the matching sweep, instead of a
traceback from mCAP's per-stage statistics (which cannot read per-chunk windows)."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mcap.app.ranks import percent
from mcap.core.schedules.predict import RankCosts, evaluate, event_model, search
from mcap.figures._style import fmt_bytes
from mcap.io import orders
from mcap.io.jsonio import load_profile, load_sweep
from mcap.runner.orders import generate
from tests.conftest import APP

pytestmark = [pytest.mark.app, pytest.mark.integration]
DATA = Path(__file__).resolve().parents[2] / "data" / "schedules"
PROFILE = DATA / "vgg11-i32-h128-cpu2-zb.profile.json"
SWEEP = DATA / "vgg11-i32-h128-cpu2-interleaved-zb.sweep.json"


@pytest.fixture
def at(tmp_store):
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    for path in (PROFILE, SWEEP):
        at.get("file_uploader")[0].upload(path.name, path.read_bytes(), "application/json").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]  # Overview: said, not an error
    assert any("device by device" in i.value for i in at.info)
    return at


def _metrics(at):
    return {m.label: m.value for m in at.metric}


def test_predict_and_recommend_a_zero_bubble_profile_rank_by_rank(at):
    profile, sweep = load_profile(PROFILE), load_sweep(SWEEP)
    al = generate("interleaved-zb", 2, 2, profile.setup.chunks)
    model = event_model([profile], generate)
    run = next(r for r in sweep.runs if r.status == "ok" and tuple(r.balance) == (14, 11, 3, 2))

    at.switch_page("pages/predict.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("predicted device by device" in i.value for i in at.info)
    at.text_input(key="rank-text").set_value("14,11,3,2").run()
    got = _metrics(at)
    assert got["partitioning"] == "14-11-3-2"
    assert got["predicted peak"] == fmt_bytes(max(model.rank_peaks((14, 11, 3, 2), al)))
    assert got["measured peak"] == fmt_bytes(max(run.peaks))
    table = at.dataframe[0].value
    assert list(table["chunks (layers)"]) == ["0-13, 25-27", "14-24, 28-29"]

    at.text_input(key="rank-text").set_value("14,11,3").run()  # G x V = 4 chunks
    assert not at.exception
    assert any("has 3 entries but the schedule runs 4" in e.value for e in at.error)

    at.switch_page("pages/recommend.py").run()
    assert not at.exception, [e.value for e in at.exception]
    found = search(RankCosts(model, al))
    assert _metrics(at)["partitioning"] == "-".join(map(str, found.balance))
    assert _metrics(at)["predicted peak"] == fmt_bytes(max(found.peaks))

    for page in ("explained", "present", "hybrid"):  # per-stage statistics: said
        at.switch_page(f"pages/{page}.py").run()
        assert not at.exception and not at.error, (page, [e.value for e in at.error])
        assert any("one stage per device" in i.value for i in at.info), page


def test_partition_space_of_a_zero_bubble_sweep_device_by_device(at, monkeypatch):
    """The sweep's partitionings against the op model: the scatter and the per-device error
    histogram, with ``evaluate``'s own figures; a sweep of a schedule whose ops the profile
    did not measure is an error naming both, not a traceback."""
    # torch's lists in this process, which has imported torch already, rather than from a
    # child that imports it again for each (about 8 s each; the child is tested in
    # tests/io/test_orders.py)
    monkeypatch.setattr(orders, "_run_child", lambda reqs, timeout: [generate(*r) for r in reqs])
    profile, sweep = load_profile(PROFILE), load_sweep(SWEEP)
    ev = evaluate(event_model([profile], generate), sweep, generate)

    at.switch_page("pages/space.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("device by device" in i.value for i in at.info)
    charts = [c.proto.spec for c in at.get("plotly_chart")]
    assert len(charts) == 2
    assert "Predicted vs measured peak" in charts[0] and "predicted = measured" in charts[0]
    assert "every device of every measured partitioning" in charts[1]
    got = _metrics(at)
    # 125 partitionings ran, 2 devices each, every one predicted (a first chunk ending at
    # flatten included)
    assert got["devices compared"] == str(ev.ranks) == "250"
    assert got["median |error|"] == percent(ev.median)
    assert got["p90 |error|"] == percent(ev.p90)
    assert got["max |error|"] == percent(ev.max)
    assert got["exact to the byte"] == f"{ev.exact} of {ev.ranks}"
    assert got["op model's pick"] == "-".join(map(str, ev.pick))
    assert got["its predicted peak"] == fmt_bytes(ev.pick_predicted)
    assert got["its measured rank"] == ("not in this sweep" if ev.pick_rank is None
                                        else f"{ev.pick_rank} of {ev.partitionings}")

    other = DATA / "vgg11-i32-h128-cpu2-interleaved-1f1b.sweep.json"  # B ops: not measured
    at.switch_page("app.py").run()
    at.get("file_uploader")[0].upload(other.name, other.read_bytes(), "application/json").run()
    at.switch_page("pages/space.py").run()
    assert not at.exception, [e.value for e in at.exception]
    said = " ".join(e.value for e in at.error)
    assert "cannot be predicted" in said and "interleaved 1F1B" in said and "B ops" in said, said
    assert not at.get("plotly_chart")
