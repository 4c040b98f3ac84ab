"""scale: the binary search, the value grid, the mcap.scale/1 form, the Fig. 11 figure, and
one real scale run of a tiny AmoebaNet-D (integration)."""
from __future__ import annotations

import io
import json

import plotly.graph_objects as go
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcap.core.errors import McapError, SchemaError
from mcap.figures import scaling as fig
from mcap.workflow.scaling import (ScalePoint, ScaleResult, Scaling, bisect, from_dict, load, report, save,
                          scale, spec_with, to_dict, value_grid)
from mcap.store import Store
from mcap.core.types import Setup
from tests.conftest import APP, DATA


def counting(limit):
    asked = []

    def trains(v):
        asked.append(v)
        return v <= limit
    return trains, asked


def test_bisect_finds_the_last_value_that_trains_in_log_steps():
    grid = tuple(range(4, 132, 4))  # 32 values
    trains, asked = counting(60)
    assert bisect(grid, trains) == (60, False)
    assert asked[:2] == [4, 128] and len(asked) <= 2 + 5
    assert len(set(asked)) == len(asked)  # nothing measured twice


def test_bisect_edges():
    trains, asked = counting(0)
    assert bisect((4, 8, 12), trains) == (None, False) and asked == [4]
    trains, asked = counting(100)
    assert bisect((4, 8, 12), trains) == (12, True) and asked == [4, 12]
    assert bisect((8,), counting(8)[0]) == (8, True)
    with pytest.raises(McapError, match="empty"):
        bisect((), counting(1)[0])


@given(st.integers(1, 40), st.integers(-5, 50))
def test_bisect_matches_a_linear_scan_for_any_monotone_limit(n, limit):
    grid = tuple(range(1, n + 1))
    expected = max((v for v in grid if v <= limit), default=None)
    assert bisect(grid, lambda v: v <= limit)[0] == expected


def test_grid_and_specs_follow_the_models_granularity():
    assert value_grid("amoebanet-d:layers=3", "filters", 8, 24) == (8, 12, 16, 20, 24)
    assert value_grid("amoebanet-d", "filters", 8, 24, step=8) == (8, 16, 24)
    assert spec_with("amoebanet-d:layers=3", "filters", 40) == \
        "amoebanet-d:layers=3,filters=40,image_size=32,classes=10"
    with pytest.raises(McapError, match="must be a multiple of 4: --low 10"):
        value_grid("amoebanet-d", "filters", 10, 24)
    with pytest.raises(McapError, match="has no parameter 'width'"):
        value_grid("amoebanet-d", "width", 8, 24)
    with pytest.raises(McapError, match="--low 24 --high 8"):
        value_grid("amoebanet-d", "filters", 24, 8)


SETUP = Setup(stages=2, batch_size=8, chunks=2, capacity_bytes=10 * 2**20)


def point(v, status, peak=None, balance=(3, 3)):
    return ScalePoint(v, f"m:f={v}", v * 1000, balance, status,
                      None if peak is None else (peak // 2, peak), None, 1.0,
                      None if status == "ok" else "over capacity")


SCALING = Scaling("m", "filters", SETUP, (8, 12, 16, 20), (
    ScaleResult("mcap", 16, 16000, (point(8, "ok", 100), point(20, "oom"), point(12, "ok", 150),
                                    point(16, "ok", 190))),
    ScaleResult("time", 8, 8000, (point(8, "ok", 160), point(20, "oom"), point(12, "oom"))),
    ScaleResult("uniform", None, None, (point(8, "oom"),)),
))


def test_ratio_report_and_json_round_trip(tmp_path):
    assert SCALING.ratio("mcap") == 2.0 and SCALING.ratio("time") == 1.0
    assert SCALING.ratio("uniform") is None
    text = report(SCALING)
    assert "mcap     filters=16, 16,000 parameters, 2.00x time" in text
    assert "uniform  none: filters=8 already does not train" in text
    d = to_dict(SCALING)
    assert d["results"][0]["ratio_to_time"] == 2.0
    assert from_dict(json.loads(json.dumps(d))) == SCALING
    assert load(save(SCALING, tmp_path / "x.scale.json")) == SCALING


def test_bad_scale_files_are_refused_naming_the_file(tmp_path):
    with pytest.raises(SchemaError, match=r"expected schema 'mcap.scale/1', found 'mcap.sweep/1'"):
        from_dict({"schema": "mcap.sweep/1"}, "f.json")
    with pytest.raises(SchemaError, match=r"f.json: not a valid mcap.scale/1 file \(KeyError"):
        from_dict({"schema": "mcap.scale/1", "model": "m"}, "f.json")
    (tmp_path / "t.scale.json").write_text("{trunc")
    with pytest.raises(SchemaError, match="t.scale.json: not valid JSON"):
        load(tmp_path / "t.scale.json")


def test_figure_data_marks_the_largest_and_hides_peaks_that_did_not_train():
    pts = fig.scaling_points(SCALING)
    assert list(pts.columns) == fig.POINT_COLUMNS
    mcap = pts[pts["partitioner"] == "mcap"]
    assert mcap["value"].tolist() == [8, 12, 16, 20]  # sorted by size, not search order
    assert mcap["peak"].tolist()[:3] == [100, 150, 190] and pd_isna(mcap["peak"].tolist()[3])
    assert mcap["largest"].tolist() == [False, False, True, False]
    assert pts[pts["largest"]]["partitioner"].tolist() == ["mcap", "time"]
    summary = fig.scaling_summary(SCALING)
    assert summary["largest_params"].tolist()[:2] == [16000, 8000]
    assert summary["ratio_to_time"].tolist()[:2] == [2.0, 1.0]
    drawn = fig.draw_scaling(pts, SETUP.capacity_bytes)
    assert isinstance(drawn, go.Figure)
    names = [t.name for t in drawn.data]
    assert "mCAP: largest trainable" in names and "balanced by time: largest trainable" in names


def pd_isna(x):
    import pandas as pd
    return pd.isna(x)


def test_scale_refuses_a_setup_without_capacity_or_unknown_partitioners(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        with pytest.raises(McapError, match="needs a capacity"):
            scale("amoebanet-d:layers=3", "filters", (8,), Setup(stages=2), store=store)
        with pytest.raises(McapError, match="unknown partitioner.*'fast'"):
            scale("amoebanet-d:layers=3", "filters", (8,), SETUP, ("mcap", "fast"), store=store)


@pytest.mark.integration
def test_a_real_scale_measures_under_the_capacity_and_resumes_from_the_store(tmp_path):
    """Real stage processes under a real capacity (a tiny GPT grown by width): measured
    on this machine, params' pick peaks at 0.33 MiB at hidden=16 and 1.25 MiB at 64."""
    setup = Setup(stages=3, batch_size=8, chunks=2, capacity_bytes=2**20)
    model = "gpt:layers=3,heads=2,vocab=128,seq=16"
    with Store(tmp_path / "s.sqlite") as store:
        out = scale(model, "hidden", (16, 64), setup, ("params",), store=store, timeout=120,
                    stream=io.StringIO())
        (r,) = out.results
        assert [p.status for p in r.points] == ["ok", "oom"]
        assert r.points[0].peak <= setup.capacity_bytes and "capacity" in r.points[1].error
        assert (r.largest_value, r.at_high) == (16, False)
        assert r.largest_params == r.points[0].params > 0
        runs = len(store.run_records())
        # Run again: every run comes from the store, nothing is measured twice.
        again = scale(model, "hidden", (16, 64), setup, ("params",), store=store, timeout=120,
                      stream=io.StringIO())
        assert len(store.run_records()) == runs == 2
        assert [(p.value, p.status, p.peaks) for p in again.results[0].points] == \
            [(p.value, p.status, p.peaks) for p in r.points]


@pytest.mark.app
def test_scaling_page_shows_the_largest_sizes_and_the_chart(tmp_path, monkeypatch, tmp_store):
    """AppTest of pages/scaling.py on a scale file in a data folder of its own."""
    from streamlit.testing.v1 import AppTest

    save(SCALING, tmp_path / "toy.scale.json")
    monkeypatch.setenv("MCAP_DATA_DIR", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    at.switch_page("pages/scaling.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: (m.value, m.delta) for m in at.metric}
    assert metrics["mCAP"] == ("0.02M params", "2.00x balanced by time")  # plain names (issue 40)
    assert metrics["balanced by time"][0] == "0.01M params"
    assert metrics["even split"][0] == "none trains"
    shown = at.dataframe[0].value
    assert shown["value"].tolist() == fig.scaling_points(SCALING)["value"].tolist()
    assert at.selectbox[0].value == "toy.scale.json"


def test_cli_scale_refuses_bad_input_before_measuring(tmp_path, capsys):
    from mcap.cli.main import main

    base = ["scale", "--model", "amoebanet-d:layers=3", "--stages", "2", "--low", "8",
            "--high", "16", "--store", str(tmp_path / "s.sqlite")]
    assert main(base) == 2
    assert "scale needs --capacity BYTES" in capsys.readouterr().err
    assert main(base + ["--capacity", "8MiB", "--vary", "depth"]) == 2
    assert "has no parameter 'depth'" in capsys.readouterr().err
    assert main(base + ["--capacity", "8MiB", "--low", "10"]) == 2
    assert "multiple of 4: --low 10" in capsys.readouterr().err


@pytest.mark.app
def test_scaling_page_says_which_sizes_were_picked_from_measurements(tmp_path, monkeypatch, tmp_store):
    """The bundled profiling-under-the-cap result: F=104 and 120 were picked from measured
    partitionings (the statistics cannot be completed there), and the page says so."""
    import shutil

    from streamlit.testing.v1 import AppTest

    shutil.copy(DATA / "amoebanet-d-cpu4-profcap.scale.json", tmp_path)
    monkeypatch.setenv("MCAP_DATA_DIR", str(tmp_path))
    at = AppTest.from_file(APP, default_timeout=30)
    at.run()
    at.switch_page("pages/scaling.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    notes = [c.value for c in at.caption if "picked the best measured" in c.value]
    assert [n.split(":")[0] for n in notes] == ["mcap at filters=104", "mcap at filters=120"]
