"""The Partition space of a multi-chunk sweep (mcap/figures/rankspace.py): data functions
checked for equality on hand-built measured partitionings, draw functions smoke-tested."""
import plotly.graph_objects as go

from mcap.app.ranks import Measured
from mcap.figures import rankspace

MIB = 1 << 20
MEASURED = (Measured((3, 1, 1, 1), (10 * MIB, 6 * MIB), (8 * MIB, 6 * MIB)),
            Measured((1, 1, 2, 2), (7 * MIB, 9 * MIB), (7 * MIB, 9 * MIB)),
            Measured((2, 2, 1, 1), (5 * MIB, 7 * MIB), (5 * MIB, 7 * MIB)))


def test_rank_points_fullest_device_pick_and_lowest_measured():
    t = rankspace.rank_points(MEASURED, pick=(1, 1, 2, 2))
    assert list(t.columns) == rankspace.POINT_COLUMNS
    assert t["balance"].tolist() == ["3-1-1-1", "1-1-2-2", "2-2-1-1"]
    assert t["predicted_peak"].tolist() == [10 * MIB, 9 * MIB, 7 * MIB]
    assert t["measured_peak"].tolist() == [8 * MIB, 9 * MIB, 7 * MIB]
    assert t["error"].tolist() == [0.25, 0.0, 0.0]
    assert t["pick"].tolist() == [False, True, False]
    assert t["best"].tolist() == [False, False, True]
    assert t["devices"][0] == "device 0: 10.00 / 8.00 MiB<br>device 1: 6.00 / 6.00 MiB"


def test_device_errors_every_device_in_percent():
    t = rankspace.device_errors(MEASURED[:2])
    assert list(t.columns) == rankspace.ERROR_COLUMNS
    assert t.values.tolist() == [["3-1-1-1", 0, 10 * MIB, 8 * MIB, 25.0],
                                 ["3-1-1-1", 1, 6 * MIB, 6 * MIB, 0.0],
                                 ["1-1-2-2", 0, 7 * MIB, 7 * MIB, 0.0],
                                 ["1-1-2-2", 1, 9 * MIB, 9 * MIB, 0.0]]
    assert rankspace.device_errors(()).empty


def test_draw_rank_space_star_when_measured_line_when_not():
    t = rankspace.rank_points(MEASURED, pick=(1, 1, 2, 2))
    fig = rankspace.draw_rank_space(t, (1, 1, 2, 2), 9 * MIB)
    names = [tr.name for tr in fig.data]
    assert names == ["predicted = measured", "measured partitionings", "lowest measured peak",
                     "op model's pick 1-1-2-2"]
    assert fig.data[3].marker.symbol == "star" and fig.data[3].x == (9.0,)
    assert "device 1: 9.00 / 9.00 MiB" in fig.data[3].customdata[0][2]
    assert not fig.layout.shapes  # no line: the pick is a point
    unmeasured = rankspace.rank_points(MEASURED, pick=(4, 1, 1, 0))
    fig = rankspace.draw_rank_space(unmeasured, (4, 1, 1, 0), 12 * MIB)
    assert [tr.name for tr in fig.data][-1] == "lowest measured peak"
    assert fig.layout.shapes[0].x0 == 12.0 and "not in this sweep" in fig.layout.annotations[0].text
    assert fig.layout.xaxis.range[1] > 12.0  # the pick's line is in view


def test_draw_device_errors_smoke():
    fig = rankspace.draw_device_errors(rankspace.device_errors(MEASURED), 0.0, 0.25)
    assert isinstance(fig, go.Figure) and fig.data[0].type == "histogram"
    assert list(fig.data[0].x) == [25.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert len(fig.layout.shapes) == 4
