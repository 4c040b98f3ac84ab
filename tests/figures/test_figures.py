"""Figure data functions (equality on small hand-built dataclasses) and draw smoke tests."""
import pandas as pd
import plotly.graph_objects as go
import pytest

from mcap.core.errors import McapError
from mcap.figures import devices, layers, overview, progress, recommend, snippet, space
from mcap.figures import timeline as tl_fig
from mcap.figures._style import balance_str, fmt_bytes
from mcap.core.timeline import StageMemory, simulate
from mcap.runner.orders import generate
from mcap.core.types import (
    Layer, LayerStats, MemoryBreakdown, ModelInfo, Prediction, Profile, Recommendation, Run,
    Setup, Sweep,
)

MIB = 1 << 20
MODEL = ModelInfo("toy", (Layer("conv0", 100), Layer("relu0", 0), Layer("conv1", 300),
                          Layer("fc", 50)))
STATS = LayerStats((10 * MIB, 2 * MIB, 12 * MIB, 4 * MIB), (None, 1 * MIB, 7 * MIB, 3 * MIB))


def run(balance, peaks, status="ok", sps=None, breakdown=None):
    return Run(balance, status, peaks, 1.0, sps, None if status == "ok" else "x", breakdown)


def test_layer_table_values_and_missing_first_added():
    t = layers.layer_table(MODEL, STATS)
    assert list(t.columns) == layers.LAYER_COLUMNS
    assert t["name"].tolist() == ["conv0", "relu0", "conv1", "fc"]
    assert t["param_bytes"].tolist() == [100, 0, 300, 50]
    assert pd.isna(t["mem_added"][0]) and t["mem_added"][2] == 7 * MIB
    assert isinstance(layers.draw_layers(t), go.Figure)


def test_layer_table_rejects_mismatched_stats():
    with pytest.raises(McapError, match="statistics cover 2 layers but model 'toy' has 4"):
        layers.layer_table(MODEL, LayerStats((1, 2), (None, 1)))


def test_breakdown_table_only_ok_runs_with_breakdown():
    b = (MemoryBreakdown(1, 2, 3, 4), MemoryBreakdown(5, 6, 7, 8))
    runs = (run((1, 3), (10, 26), breakdown=b), run((2, 2), (9, 9)), run((3, 1), None, "oom"))
    t = layers.breakdown_table(runs)
    assert t.values.tolist() == [["1-3", 0, 1, 2, 3, 4, 10], ["1-3", 1, 5, 6, 7, 8, 26]]
    assert len(layers.draw_breakdown(t).data) == 4


def test_device_bars_with_measured_and_capacity():
    p = Prediction((1, 3), (100, 300))
    d = devices.device_bars(p, run((1, 3), (110, 280)), capacity=200)
    assert d.layers == ("0-0", "1-3") and d.measured == (110, 280) and d.over_capacity == (1,)
    fig = devices.draw_device_bars(d)
    assert [tr.type for tr in fig.data] == ["bar", "scatter"]
    assert devices.device_bars(p, run((1, 3), None, "oom")).measured is None
    t = devices.device_table(d)
    assert t.values.tolist() == [[0, "0-0", 100, 110, False], [1, "1-3", 300, 280, True]]
    assert pd.isna(devices.device_table(devices.device_bars(p)).measured).all()
    with pytest.raises(McapError, match="run of 2-2 does not match prediction of 1-3"):
        devices.device_bars(p, run((2, 2), (1, 1)))


def test_pareto_front():
    # (peak, throughput): (1,1) front, (2,3) front, (2,2) dominated, (3,3) dominated, (4,5) front
    assert space.pareto_front([1, 2, 2, 3, 4], [1, 3, 2, 3, 5]) == [True, True, False, False, True]


def test_space_points_marks_and_front():
    runs = (run((1, 3), (5, 9), sps=10.0), run((2, 2), (6, 6), sps=8.0),
            run((3, 1), (7, 2), sps=12.0), run((1, 1), None, "oom"))
    marks = (space.Mark("exact", (2, 2)), space.Mark("bf", (2, 2)), space.Mark("uniform", (3, 1)))
    pts = space.space_points(runs, marks)
    assert pts.values.tolist() == [["2-2", 6, 8.0, True, "exact, bf", False, "measured"],
                                   ["3-1", 7, 12.0, True, "uniform", False, "measured"],
                                   ["1-3", 9, 10.0, False, "", False, "measured"]]
    fig = space.draw_space(pts, selected="3-1")
    names = [tr.name for tr in fig.data]
    assert names == ["measured partitionings", "Pareto front", "mCAP (brute force)",
                     "mCAP (exact)", "even split", "selected 3-1"]
    assert [c[0] for c in fig.data[0].customdata] == ["2-2", "3-1", "1-3"]
    assert space.clicked_balance({"selection": {"points": [
        {"customdata": list(fig.data[0].customdata[1])}]}}) == "3-1"


def test_marks_table_rank_and_unmeasured():
    runs = (run((1, 3), (5, 9)), run((2, 2), (6, 6)), run((3, 1), (7, 2)), run((4, 0), None, "oom"))
    preds = (Prediction((2, 2), (5, 5)), Prediction((1, 3), (4, 8)), Prediction((0, 4), (1, 2)))
    marks = (space.Mark("exact", (2, 2)), space.Mark("params", (0, 4)), space.Mark("x", (4, 0)))
    t = space.marks_table(marks, runs, preds)
    assert t["rank"].tolist()[0] == 1 and pd.isna(t["rank"][1]) and t["status"].tolist()[2] == "oom"
    assert t["predicted_peak"].tolist()[:2] == [5, 2] and t["measured_peak"].tolist()[0] == 6


def test_error_stats_p90_and_paper_share():
    runs = tuple(run((i, 10 - i), (100, 100)) for i in range(1, 11)) + (run((0, 0), None, "oom"),)
    # relative errors -0.01 .. -0.10, +0.20 for the last
    preds = tuple(Prediction((i, 10 - i), (100 - i, 1)) for i in range(1, 10)) + (Prediction((10, 0), (120,)),)
    e = space.error_stats(runs, preds)
    assert e.count == 10
    assert e.errors[:3] == pytest.approx((-0.01, -0.02, -0.03))
    # |errors| 0.01 .. 0.09, 0.20: the 90th percentile interpolates between 0.09 and 0.20,
    # the one definition `python -m mcap evaluate` uses too (mcap.core.evaluate.percentile)
    assert e.p90 == pytest.approx(0.09 + 0.1 * (0.20 - 0.09))
    assert e.within_paper == pytest.approx(0.9)
    assert isinstance(space.draw_errors(e), go.Figure)
    assert space.error_stats((), ()).p90 is None


def test_the_error_histogram_zooms_to_the_errors_and_writes_the_papers_14_percent():
    """Issue 40, item 10: errors of about 0.1% were one hairline bar on an axis fixed at
    ±14% by the paper's lines."""
    runs = tuple(run((i, 40 - i), (1000, 1000)) for i in range(1, 40))
    preds = tuple(Prediction((i, 40 - i), (1000 + (i % 3) - 1, 1)) for i in range(1, 40))
    e = space.error_stats(runs, preds)  # errors -0.1%, 0, +0.1%
    view = space.error_view(e)
    assert -0.2 < view.low < -0.1 and 0.1 < view.high < 0.2 and not view.paper_drawn
    assert view.bin_size == pytest.approx((view.high - view.low) / space.BINS)
    fig = space.draw_errors(e)
    assert tuple(fig.layout.xaxis.range) == (view.low, view.high)
    texts = [a.text for a in fig.layout.annotations]
    assert any("paper: 90% within ±14% (off this scale)" in t for t in texts), texts
    assert any(t.startswith("90% within ±0.1") for t in texts), texts
    assert not any(abs(sh.x0) == pytest.approx(14) for sh in fig.layout.shapes)
    # errors as wide as the paper's: its lines are drawn
    wide = space.error_stats(runs, tuple(Prediction(p.balance, (int(p.peaks[0] * 1.2),))
                                         for p in preds))
    assert space.error_view(wide).paper_drawn
    assert any(sh.x0 == pytest.approx(14) for sh in space.draw_errors(wide).layout.shapes)


def test_the_picks_whiskers_show_at_a_tenth_of_a_percent():
    from mcap.figures import story
    from mcap.io import datasets
    profile = datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4.profile.json"))
    sweep = datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4-full.sweep.json"))
    s = story.story(profile, sweep)
    assert s.errors.p90 < 0.002
    bars = story.draw_picks(s).data[0]
    assert bars.error_y.width >= 12 and bars.error_y.thickness >= 2
    assert list(bars.text) == [f"±{100 * s.errors.p90:.2g}%"] * 3


def test_comparison_table_and_curve():
    recs = (Recommendation("exact", (2, 2), (5, 6), 0.01, 3),
            Recommendation("bo", (1, 3), (4, 8), 1.5, 20, (9, 8, 8)))
    t = recommend.comparison_table(recs, (run((2, 2), (7, 7)),))
    assert t["method"].tolist() == ["exact", "bo"]
    assert t["predicted_peak"].tolist() == [6, 8]
    assert t["measured_peak"][0] == 7 and pd.isna(t["measured_peak"][1])
    c = recommend.curve_frame(recs[1].curve)
    assert c.values.tolist() == [[1, 9], [2, 8], [3, 8]]
    assert isinstance(recommend.draw_curve(c, optimum=6), go.Figure)


def test_snippets_name_split_layers():
    assert snippet.split_points(MODEL, (1, 2, 1)) == ("relu0", "fc")
    assert "GPipe(model, balance=[1, 2, 1], chunks=4)" in snippet.gpipe_snippet(MODEL, (1, 2, 1), 4)
    text = snippet.pipelining_snippet(MODEL, (1, 2, 1), 4)
    assert "'relu0': SplitPoint.BEGINNING" in text and "'fc': SplitPoint.BEGINNING" in text
    with pytest.raises(McapError, match="balance sums to 3 but the model has 4 layers"):
        snippet.split_points(MODEL, (1, 2))


def test_headline_and_split_bars():
    setup = Setup(stages=2, chunks=4, capacity_bytes=None)
    prof = Profile(MODEL, setup, STATS, (run((1, 3), (5, 9)), run((2, 2), (6, 6)), run((3, 1), None, "oom")))
    h = overview.headline(prof)
    assert (h.kind, h.layers, h.param_bytes, h.runs, h.ok, h.oom) == ("profile", 4, 450, 3, 2, 1)
    assert h.lowest_peak == 6 and h.lowest_balance == (2, 2)
    assert overview.headline(Sweep(MODEL, setup, ())).lowest_peak is None
    f = overview.split_bars((("uniform", Prediction((2, 2), (5, 6))), ("exact", Prediction((1, 3), (4, 4)))))
    assert f.values.tolist() == [["uniform", "2-2", 0, 5], ["uniform", "2-2", 1, 6],
                                 ["exact", "1-3", 0, 4], ["exact", "1-3", 1, 4]]
    assert len(overview.draw_split_bars(f).data) == 2


def test_timeline_frames():
    t = simulate(generate("gpipe", 2, 1, 2), (1, 1), (StageMemory(10, 1), StageMemory(20, 2)))
    ops = tl_fig.ops_frame(t)
    assert ops.iloc[0].tolist() == [0, 0, "F", 0, 0, 1] and len(ops) == 8
    mem = tl_fig.memory_frame(t)
    assert mem[(mem.device == 0) & (mem.step == 1)].values.tolist() == [[0, 1, "0 1", 2, 12]]
    # one box trace per device and kind, one memory line per device
    assert len(tl_fig.draw_timeline(t).data) == 4 + 2
    # the time cursor: the running boxes outlined, each device's level marked at the step
    fig = tl_fig.draw_timeline(t, cursor=1)
    marks = [tr for tr in fig.data if tr.name == "level at step 1"][0]
    assert list(marks.y) == [v / MIB for v in (12, 22)] and list(marks.x) == [1.5, 1.5]
    outlined = [tr for tr in fig.data if tr.name == "running at step 1"][0]
    assert list(outlined.base) == [1, 1] and list(outlined.y) == ["device 0", "device 1"]
    step = tl_fig.step_frame(t, 1)
    assert step.values.tolist() == [[0, "F1", "0 1", 2, 12], [1, "F0", "0", 1, 22]]


def test_runs_table_and_formatting():
    t = progress.runs_table((run((1, 3), (MIB, 2 * MIB), sps=3.0), run((2, 2), None, "oom")))
    assert t["balance"].tolist() == ["1-3", "2-2"]
    assert t["peak"][0] == 2 * MIB and pd.isna(t["peak"][1])
    assert t["peaks_mib"].tolist() == ["1.0 / 2.0", ""]
    assert balance_str((3, 3, 5, 19)) == "3-3-5-19"
    assert fmt_bytes(3 * MIB // 2) == "1.50 MiB" and fmt_bytes(None) == "-" and fmt_bytes(12) == "12 B"


def test_bo_reports_its_best_so_far_live_and_the_same_curve_it_returns():
    from mcap.core.search import recommend
    stats = LayerStats(tuple(100 + (i * 37) % 50 for i in range(12)),
                       (None,) + tuple((i * 53) % 40 - 5 for i in range(1, 12)))
    seen = []
    live = recommend(stats, 3, "bo", iterations=12, seed=1, on_best=lambda n, b: seen.append((n, b)))
    ref = recommend(stats, 3, "bo", iterations=12, seed=1)
    assert (live.balance, live.predicted_peaks, live.curve) == (ref.balance, ref.predicted_peaks, ref.curve)
    assert [n for n, _ in seen] == list(range(1, 13))
    assert tuple(b for _, b in seen) == ref.curve


def _every_finished_figure():
    """One figure of each drawing the pages export, on toy data."""
    from mcap.figures import story as fig_story
    t = simulate(generate("gpipe", 2, 1, 2), (1, 1), (StageMemory(10, 1), StageMemory(20, 2)))
    pts = space.space_points((run((1, 3), (5, 9), sps=2.0), run((2, 2), (6, 6), sps=3.0)),
                             (space.Mark("exact", (1, 3)), space.Mark("bf", (1, 3))))
    bars = devices.device_bars(Prediction((1, 3), (4, 5)), run((1, 3), (4, 6)), 5)
    split = overview.split_bars((("uniform", Prediction((2, 2), (5, 6))),
                                 ("exact", Prediction((1, 3), (4, 4)))))
    return [tl_fig.draw_timeline(t, "d"), tl_fig.draw_timeline(t, "d", levels=False),
            space.draw_space(pts, "1-3", "d"), devices.draw_device_bars(bars, dataset="d"),
            overview.draw_split_bars(split, "d"), layers.draw_layers(layers.layer_table(MODEL, STATS))]


def test_exported_figures_use_system_fonts_and_start_below_the_toolbar():
    """3 of 7 exported PNGs cut the last legend label ("exact 16-1-5-‹"): the page drew in its
    web font, the PNG in a wider fallback. The toolbar covered two of Present's titles
    (issue 26, Presenting)."""
    from mcap.figures._style import FONT, MODEBAR
    for fig in _every_finished_figure():
        assert fig.layout.font.family == FONT and "Source Sans" not in FONT
        assert fig.layout.title.yref == "container" and fig.layout.title.pad.t >= MODEBAR
        assert fig.layout.margin.t >= MODEBAR + 60


def test_space_names_every_pick_beside_its_star():
    """With estimated throughput on, the bf star hid under exact's (issue 26, 5): stars on
    one point shrink one after the other, and a text names all the picks there."""
    pts = space.space_points((run((1, 3), (5, 9), sps=2.0), run((2, 2), (6, 6), sps=3.0)),
                             (space.Mark("bf", (1, 3)), space.Mark("exact", (1, 3)),
                              space.Mark("uniform", (2, 2))))
    fig = space.draw_space(pts)
    stars = {t.name: list(t.marker.size) for t in fig.data if t.marker and t.marker.symbol == "star"}
    assert stars == {"mCAP (brute force)": [26], "mCAP (exact)": [18], "even split": [26]}
    names = [a.text for a in fig.layout.annotations]
    assert sorted(names) == ["even split", "mCAP (brute force), mCAP (exact)"]


def test_timeline_draws_measured_peaks_and_devices_in_one_colour_set():
    from mcap.figures._style import device_color
    t = simulate(generate("gpipe", 2, 1, 2), (1, 1), (StageMemory(10, 1), StageMemory(20, 2)))
    fig = tl_fig.draw_timeline(t, measured=(13 * MIB, 24 * MIB), measured_label="GPipe, 2 micro-batches")
    lines = {tr.name: tr for tr in fig.data if tr.type == "scatter"}
    # each measured line says what it was measured under (issue 40, 6)
    assert list(lines["device 1 measured (GPipe, 2 micro-batches)"].y) == [24.0, 24.0]
    boxes = [tr for tr in fig.data if tr.type == "bar"]
    # a box's colour is its device's, the same as the device's memory line
    assert {(tr.y[0], tr.marker.color) for tr in boxes} == {("device 0", device_color(0)),
                                                            ("device 1", device_color(1))}
    assert lines["device 0"].line.color == device_color(0)
    # without levels, the schedule alone
    assert all(tr.type == "bar" for tr in tl_fig.draw_timeline(t, levels=False).data)


def test_report_opens_with_the_setup_and_a_true_title():
    """The HTML report never said CPU or GPU, batch, micro-batches, schedule, checkpointing,
    predictor or date, and its title said "on 4 devices" (issue 26, Presenting)."""
    import datetime
    from mcap.core.machine import Machine
    from mcap.figures import story as fig_story
    setup = Setup(stages=2, batch_size=8, chunks=4, checkpoint="except_last")
    machine = Machine(device="cpu", cpu="AMD EPYC", isa="AVX2", threads=1, torch="2.13.0+cpu")
    prof = Profile(MODEL, setup, STATS, (run((1, 3), (5, 9)), run((2, 2), (6, 6))), machine=machine)
    sweep = Sweep(MODEL, setup, (run((1, 3), (5 * MIB, 9 * MIB)), run((2, 2), (6 * MIB, 6 * MIB))),
                  machine=machine)
    s = fig_story.story(prof, sweep, "paper", ("p.profile.json", "s.sweep.json"), datetime.date(2026, 11, 26))
    setup_rows = dict(s.setup)
    assert setup_rows["device"].startswith("CPU") and "AMD EPYC" in setup_rows["machine"]
    assert setup_rows["batch"] == "8 samples in 4 micro-batches"
    assert (setup_rows["schedule"], setup_rows["checkpointing"]) == ("gpipe", "except_last")
    assert setup_rows["predictor"] == "paper" and setup_rows["date"] == "2026-11-26"
    assert setup_rows["profile"].startswith("p.profile.json") and setup_rows["sweep"].startswith("s.sweep.json")
    html = fig_story.report_html(s, ())
    assert s.title == "mcap: partitioning toy over 2 pipeline stages on CPU"
    assert f"<title>{s.title}</title>" in html and "devices" not in s.title
    assert html.index("Setup") < html.index("Numbers") and "8 samples in 4 micro-batches" in html


def test_space_draws_composed_picks_and_the_lowest_peak_with_an_estimate():
    from mcap.core.throughput import Estimate  # noqa: F401  (the type the page passes)

    class Flat:  # an estimate of 5 samples/s for everything
        def samples_per_second(self, balance):
            return 5.0
    runs = (run((1, 3), (5, 9), sps=2.0), Run((2, 2), "ok", (4, 4), 0.0, composed=True),
            Run((3, 1), "ok", (6, 7), 0.0, composed=True), Run((4, 0), "ok", (8, 8), 0.0, composed=True))
    marks = (space.Mark("exact", (3, 1)),)
    few = space.space_points(runs, marks, Flat(), composed="marks")
    assert sorted(few["balance"]) == ["1-3", "2-2", "3-1"]  # measured, lowest, pick
    assert few.set_index("balance")["estimated"].to_dict() == {"2-2": True, "1-3": False, "3-1": True}
    assert len(space.space_points(runs, marks, Flat())) == 4
    assert len(space.space_points(runs, marks)) == 1  # no estimate: measured throughput only


def test_measured_timeline_frame_lists_every_event_in_the_order_the_device_ran_it():
    from mcap.core import memtimeline
    from mcap.core.types import Run, StageTimes
    from mcap.figures import timeline as fig_tl

    mem0 = (("-", 0, -1, 10, 12, 11), ("F", 0, 0, 11, 30, 20), ("B", 0, 0, 20, 25, 12),
            ("S", 0, -1, 12, 16, 12))
    mem1 = (("F", 0, 0, 5, 9, 8), ("B", 0, 0, 8, 40, 6))
    times = tuple(StageTimes(((0.1,),), ((0.2,),), (0.0,), memory=m) for m in (mem0, mem1))
    run = Run((1, 1), "ok", (30, 40), 1.0, times=times)
    evs = memtimeline.events(run)
    frame = fig_tl.measured_frame(evs)
    assert list(frame["op"]) == ["·", "F0", "B0", "step", "F0", "B0"]
    assert list(frame["peak"]) == [12, 30, 25, 16, 9, 40]
    assert list(frame["device"]) == [0, 0, 0, 0, 1, 1]
    assert [memtimeline.peak_event(d).label for d in evs] == ["F0", "B0"]
    said = memtimeline.sentences(evs, [30, 50], ["F0", "F0"])
    assert said[0].startswith("device 0: measured peak 0.00 MiB inside F0 (forward)")
    assert "predicted" in said[1] and "(-20.0%)" in said[1]
    assert "puts its peak in F0" in said[1] and "peaks in F0 too" in said[0]
    fig = fig_tl.draw_measured(evs, balance=(1, 1))
    assert len(fig.data) == 4
    assert memtimeline.events(Run((1, 1), "ok", (30, 40), 1.0)) is None


def test_space_points_say_which_throughputs_rest_on_stage_times():
    """A run whose stages ran alone has a throughput replayed from their times
    (``Run.estimated``): drawn hollow, its hover says so, and the page's caption names the
    link the sweep recorded (issue 25, item 2)."""
    from mcap.core import stagetime

    class Flat:
        def samples_per_second(self, balance):
            return 5.0
    alone = Run((2, 2), "ok", (4, 4), 1.0, samples_per_second=3.0, estimated=True)
    runs = (run((1, 3), (5, 9), sps=2.0), alone, Run((3, 1), "ok", (6, 7), 0.0, composed=True))
    pts = space.space_points(runs, (), Flat()).set_index("balance")
    assert pts["basis"].to_dict() == {"1-3": space.MEASURED, "2-2": space.STAGE_TIMES,
                                      "3-1": space.PER_LAYER}
    assert pts["estimated"].to_dict() == {"1-3": False, "2-2": True, "3-1": True}
    fig = space.draw_space(space.space_points(runs, (), Flat()))
    symbols = {c[0]: m for c, m in zip(fig.data[0].customdata, fig.data[0].marker.symbol)}
    assert symbols == {"1-3": "circle", "2-2": "circle-open", "3-1": "circle-open"}
    notes = {c[0]: c[1] for c in fig.data[0].customdata}
    assert notes["2-2"] == " (estimated from its stages' times alone)" and notes["1-3"] == ""
    link = stagetime.Link(115e-6, 2.27e9, "gloo", 2, (1.0, 1.06))
    said = space.stage_times_sentence(1, 3, {stagetime.KEY: stagetime.link_to_json(link)})
    assert said.startswith("1 of the 3 points drawn") and "gloo 115 us + 2.27 GB/s" in said
    plain = space.stage_times_sentence(1, 3, {stagetime.KEY: {"how": "<script>"}})
    assert "over the link" not in plain and "<script>" not in plain
    assert "2-core CPU VM" in plain  # a CPU sweep's estimates are judged by CPU runs
    # The CPU's figure is the one of the sweep's own case: stages sharing the cores (slots 2
    # above) or a core each (slots 0); with no link, both.
    assert "more stages than cores as here" in said and "a core per stage as here" not in said
    own = space.stage_times_sentence(1, 3, {stagetime.KEY: stagetime.link_to_json(
        stagetime.Link(115e-6, 2.27e9, "gloo", 0, (1.0, 1.06)))})
    assert "a core per stage as here" in own and "more stages than cores" not in own
    assert "a core per stage, and within" in plain and "{" not in plain + said + own
    gpu = space.stage_times_sentence(1, 3, None, "cuda")
    assert "H200" in gpu and "CPU VM" not in gpu


def test_throughput_notes_say_what_each_composed_and_estimated_point_rests_on():
    """The partition-space captions, from the sweep: composed runs with no throughput (with
    or without the per-layer model), composed runs replayed from stages alone, and the
    stage-times note (moved out of pages/space.py)."""
    from types import SimpleNamespace

    class Flat:
        n, p50, p90 = 3, 0.1, 0.2

        def samples_per_second(self, balance):
            return 5.0

    def sweep(*runs):
        return SimpleNamespace(runs=runs, extra=None, setup=SimpleNamespace(device="cpu"))
    measured = run((1, 3), (5, 9), sps=2.0)
    bare = Run((2, 2), "ok", (4, 4), 0.0, composed=True)
    alone = Run((3, 1), "ok", (6, 7), 0.0, samples_per_second=3.0, composed=True,
                estimated=True)
    s = sweep(measured, bare)
    plain = space.throughput_notes(s, space.space_points(s.runs), None, False)
    assert len(plain) == 1 and plain[0].startswith("1 of these partitionings were composed")
    assert "no star" in plain[0] and "the 1 whose throughput is known" in plain[0]
    modelled = space.throughput_notes(s, space.space_points(s.runs, (), Flat(), "marks"),
                                      Flat(), False)
    assert "per-layer times" in modelled[0] and "The scatter draws 1 of them" in modelled[0]
    s = sweep(measured, alone)
    notes = space.throughput_notes(s, space.space_points(s.runs), None, False)
    assert notes[0] == ("1 of these partitionings were composed from the stages of measured "
                        "ones (stage reuse: exact per-stage peaks).")
    assert notes[1].startswith("1 of the 2 points drawn have a throughput **estimated**")
    assert space.throughput_notes(sweep(measured), space.space_points((measured,)), None,
                                  False) == []


def test_the_headline_is_the_overviews_gain_measured_where_the_sweep_has_both():
    """Issue 40, item 11: Present's headline sentence, computed from the data by the
    Overview's own computation."""
    from mcap.figures import overview, story
    from mcap.io import datasets
    profile = datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4.profile.json"))
    sweep = datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4-full.sweep.json"))
    s = story.story(profile, sweep)
    best, even = s.picks[0], s.picks[1]
    peaks = {tuple(r.balance): r.peak for r in sweep.runs if r.status == "ok"}
    gain = overview.split_gain(best, even, sweep.runs)
    assert gain.measured and gain.best == peaks[tuple(best.balance)]
    assert gain.even == peaks[tuple(even.balance)]
    pct = 100 * (1 - gain.best / gain.even)
    assert s.headline() == gain.sentence()
    assert s.headline().startswith(f"mCAP's split {balance_str(best.balance)} lowers the fullest "
                                   f"device by {pct:.0f}% against an even split "
                                   f"({balance_str(even.balance)}), measured: ")
    # without a sweep: the same computation on the predicted peaks, said so
    alone = story.story(profile, None)
    predicted = overview.split_gain(best, even)
    assert not predicted.measured and alone.headline().endswith(
        f"predicted: {fmt_bytes(best.predicted_peak)} instead of {fmt_bytes(even.predicted_peak)}.")
    assert predicted.higher == pytest.approx(even.predicted_peak / best.predicted_peak - 1)
    import html
    assert html.escape(s.headline()) in story.report_html(s, ())


def test_plain_names_on_charts_code_names_in_tooltips():
    """Issue 40, item 12: a room reads "mCAP (exact)", "even split", "balanced by
    parameters"; the code names stay in the tooltips and the exports."""
    from mcap.figures._style import method_label, table_view
    assert [method_label(m) for m in ("exact", "uniform", "params", "time", "bo", "mcap")] == \
        ["mCAP (exact)", "even split", "balanced by parameters", "balanced by time",
         "Bayesian search", "mCAP"]
    assert method_label("nosuch") == "nosuch"
    frame = overview.split_bars((("uniform", Prediction((2, 2), (5, 6))),
                                 ("exact", Prediction((1, 3), (4, 4)))))
    fig = overview.draw_split_bars(frame)
    assert [t.name for t in fig.data] == ["even split 2-2", "mCAP (exact) 1-3"]
    assert fig.data[0].hovertemplate.startswith("uniform 2-2")
    assert "even split vs mCAP (exact)" in fig.layout.title.text
    shown = table_view(pd.DataFrame({"method": ["exact", "params"], "peak": [1, 2]}), ("peak",))
    assert shown["method"].tolist() == ["mCAP (exact)", "balanced by parameters"]


def test_pick_labels_close_together_take_different_rows():
    levels = space.label_levels([10.0, 10.5, 11.0, 50.0], span=40.0)
    assert levels[0] != levels[1] != levels[2] != levels[0] and levels[3] == 0
    assert space.label_levels([1.0], 0.0) == [0]


def test_savers_screen_table_leaves_out_columns_zero_everywhere_and_the_capacity_reads():
    """Issue 40, item 13: the savers table ran past the right edge at 1280 px, and the
    capacity line's grey label sat unreadable on a red bar."""
    from mcap.figures import press
    table = pd.DataFrame({"device": [0, 1], "layers": ["0-1", "2-3"], "before": [5, 6],
                          "after": [4, 6], "recompute": [1, 0], "swap": [0, 0], "d2d": [0, 0],
                          "received": [0, 0], "transient": [0, 0], "segment": [0, 0],
                          "lower then": [0, 0]})
    assert list(press.screen_table(table).columns) == ["device", "layers", "before", "after",
                                                       "recompute"]
    fig = press.draw_savers(table, 5, (2, 2))
    label = [a for a in fig.layout.annotations if a.text.startswith("capacity")][0]
    assert label.bgcolor == "white" and label.font.color == "#b71c1c"
