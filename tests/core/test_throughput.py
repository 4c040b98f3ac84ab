"""Estimated throughput of composed partitionings (issue 13 item 1): the bubble model, its
scale fitted on measured runs only, the JSON form a sweep keeps, and the Partition-space
figure marking estimated points."""
import pytest

from mcap.core import throughput
from mcap.core.errors import McapError
from mcap.core.types import Run
from mcap.figures import space as fig_space

COST = (4.0, 1.0, 1.0, 2.0, 2.0, 6.0)


def run(balance, sps=None, composed=False):
    return Run(tuple(balance), "ok", tuple(1 for _ in balance), 1.0, samples_per_second=sps,
               composed=composed)


def test_units_is_fill_drain_plus_bottleneck():
    # stages (4+1), (1+2), (2+6): sum 16, slowest 8, 4 micro-batches -> 3 * 8 + 16
    assert throughput.units((2, 2, 2), COST, 4) == 40


def test_scale_is_fitted_on_measured_runs_only_and_reports_its_error():
    k = 0.5  # seconds per unit in the "machine" that measured these runs
    measured = [run(b, 8 / (k * throughput.units(b, COST, 4))) for b in ((1, 2, 3), (3, 2, 1),
                                                                          (2, 2, 2))]
    composed = [run((4, 1, 1), composed=True)]
    est = throughput.fit(measured + composed, COST, 4, 8)
    assert est.n == 3 and est.seconds_per_unit == pytest.approx(k) and est.max == pytest.approx(0)
    assert est.samples_per_second((4, 1, 1)) == pytest.approx(8 / (k * throughput.units((4, 1, 1), COST, 4)))
    back = throughput.from_json(est.as_json())
    assert back == est
    assert throughput.fit(composed, COST, 4, 8) is None  # nothing measured to scale on


def test_bad_files_and_costs_are_refused():
    assert throughput.from_json({"layer_cost": ["x"]}) is None
    assert throughput.from_json({"layer_cost": [1], "chunks": 1, "batch_size": 1,
                                 "seconds_per_unit": -1, "fitted_on": 1, "error_p50": 0,
                                 "error_p90": 0, "error_max": 0}) is None
    with pytest.raises(McapError, match="per-layer times"):
        throughput.fit([run((6,), 1.0)], (0, 0, 0, 0, 0, 0), 4, 8)


def test_space_points_mark_estimated_throughput():
    measured = [run((1, 2, 3), 10.0), run((3, 2, 1), 12.0)]
    composed = [run((2, 2, 2), composed=True)]
    assert len(fig_space.space_points(tuple(measured + composed))) == 2
    est = throughput.fit(measured, COST, 4, 8)
    pts = fig_space.space_points(tuple(measured + composed), estimate=est)
    row = pts[pts["balance"] == "2-2-2"].iloc[0]
    assert bool(row["estimated"]) and row["samples_per_second"] == pytest.approx(
        est.samples_per_second((2, 2, 2)))
    assert not pts[pts["balance"] != "2-2-2"]["estimated"].any()
    fig = fig_space.draw_space(pts)
    assert "circle-open" in fig.data[0].marker.symbol
