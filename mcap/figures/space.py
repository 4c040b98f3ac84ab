"""The partition space of a sweep (paper 4.2, Fig. 9 and 10): peak memory vs throughput of
every measured partitioning with its Pareto front and the recommendations highlighted, and
the histogram of the predictor's relative error."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import balance_str, finish, method_color, method_label, scaled, unit_for
from mcap.core.evaluate import percentile
from mcap.core.types import Prediction, Run

NOT_SAMPLED = "not in this sample"  # a pick the sweep did not measure (a sampled sweep)
PAPER_ERROR = 0.14  # paper 4.2: 90% of VGG11 partitionings predicted within 14%
POINT_COLUMNS = ["balance", "peak", "samples_per_second", "pareto", "marks", "estimated", "basis"]
# What a point's throughput rests on (``space_points``' "basis" column)
MEASURED = "measured"  # timed on a concurrent run of the partitioning
STAGE_TIMES = "stage times"  # replayed from its stages' own times run alone (mcap.core.stagetime)
PER_LAYER = "per-layer model"  # a composed run's, from per-layer times (mcap.core.throughput)
_HOVER = {MEASURED: "", STAGE_TIMES: " (estimated from its stages' times alone)",
          PER_LAYER: " (estimated, per-layer model)"}


@dataclass(frozen=True)
class Mark:
    """A partitioning to highlight: a search method's pick or a baseline's."""
    label: str
    balance: tuple[int, ...]


def pareto_front(peaks: list[int], throughputs: list[float]) -> list[bool]:
    """True where no other point has lower-or-equal peak and higher-or-equal throughput
    with one strictly better: the best trade-offs between memory and speed."""
    order = sorted(range(len(peaks)), key=lambda i: (peaks[i], -throughputs[i]))
    out, best = [False] * len(peaks), -math.inf
    for i in order:
        if throughputs[i] > best:
            out[i], best = True, throughputs[i]
    return out


def space_points(runs: tuple[Run, ...], marks: tuple[Mark, ...] = (),
                 estimate=None, composed: str = "all") -> pd.DataFrame:
    """One row per ok run with a throughput: balance string, peak bytes, samples/s, whether it
    is on the Pareto front, the labels of the marks that picked it ("" if none), whether
    the throughput is estimated, and what it rests on (``basis``: :data:`MEASURED`,
    :data:`STAGE_TIMES` for a run whose stages ran alone, :data:`PER_LAYER`). ``estimate``
    (``mcap.core.throughput.Estimate``) gives the composed runs, which have none measured, an
    estimated one: every composed run (``composed="all"``), or only the marked ones and the lowest peak (``"marks"``), so every
    pick has its star and the lowest point is the sweep's lowest measured peak without
    drawing thousands of estimated points."""
    if composed not in ("all", "marks"):
        raise ValueError(f"composed is {composed!r}, not 'all' or 'marks'")
    marked = {tuple(m.balance) for m in marks}
    ok_runs = [r for r in runs if r.status == "ok" and r.peaks]
    lowest = min(ok_runs, key=lambda r: r.peak, default=None)
    if lowest is not None:
        marked.add(tuple(lowest.balance))
    ok = [r for r in ok_runs if r.samples_per_second is not None or (
        estimate is not None and r.composed and (composed == "all" or tuple(r.balance) in marked))]
    labels: dict[tuple[int, ...], list[str]] = {}
    for m in marks:
        labels.setdefault(tuple(m.balance), []).append(m.label)
    peaks = [r.peak for r in ok]
    est = [r.samples_per_second is None for r in ok]
    tput = [estimate.samples_per_second(r.balance) if e else float(r.samples_per_second)
            for r, e in zip(ok, est)]
    front = pareto_front(peaks, tput)
    basis = [PER_LAYER if e else STAGE_TIMES if getattr(r, "estimated", False) else MEASURED
             for r, e in zip(ok, est)]
    rows = [(balance_str(r.balance), r.peak, t, f, ", ".join(labels.get(tuple(r.balance), [])),
             b != MEASURED, b) for r, t, f, b in zip(ok, tput, front, basis)]
    return pd.DataFrame(rows, columns=POINT_COLUMNS).sort_values("peak", kind="stable").reset_index(drop=True)


def marks_table(marks: tuple[Mark, ...], runs: tuple[Run, ...],
                predictions: tuple[Prediction, ...]) -> pd.DataFrame:
    """Each mark with its predicted peak and, when the sweep measured it, the measured peak,
    status and rank among the ok runs by measured peak (1 = lowest)."""
    by_balance = {tuple(r.balance): r for r in runs}
    pred = {tuple(p.balance): p.peak for p in predictions}
    ranked = sorted(r.peak for r in runs if r.status == "ok" and r.peaks)
    rows = []
    for m in marks:
        run = by_balance.get(tuple(m.balance))
        measured = run.peak if run is not None and run.status == "ok" else None
        rank = None if measured is None else 1 + sum(1 for p in ranked if p < measured)
        rows.append((m.label, balance_str(m.balance), pred.get(tuple(m.balance)), measured,
                     NOT_SAMPLED if run is None else run.status, rank))
    frame = pd.DataFrame(rows, columns=["method", "balance", "predicted_peak", "measured_peak",
                                        "status", "rank"])
    for col in ("predicted_peak", "measured_peak", "rank"):
        frame[col] = frame[col].astype("Int64")
    return frame


def clicked_balance(state) -> Optional[str]:
    """The balance of the first point of a plotly chart's selection state (what
    ``st.plotly_chart(on_select=...)`` keeps), or None when nothing is selected."""
    try:
        points = state["selection"]["points"]
    except (KeyError, TypeError):
        return None
    for p in points or ():
        data = p.get("customdata")
        if data:
            return data if isinstance(data, str) else data[0]
    return None


# How far such estimates landed from runs together (BENCHMARKS.md), by the sweep's device
# and, on the CPU, by whether its stages had a core each (the link's slots 0) or shared fewer.
_STAGE_TIMES_ERROR = {
    "cpu": "On the project's 2-core CPU VM they were within {own} (p90) of concurrent runs "
           "with a core per stage, and within {shared} with more stages than cores, {high} "
           "high on average: wall time the OS scheduler loses there, which the replay leaves "
           "out",
    "cpu-own": "On the project's 2-core CPU VM, with a core per stage as here, they were "
               "within {own} (p90) of concurrent runs",
    "cpu-shared": "On the project's 2-core CPU VM, with more stages than cores as here, they "
                  "were within {shared} (p90) of concurrent runs, {high} high on average: wall "
                  "time the OS scheduler loses, which the replay leaves out (with a core per "
                  "stage: {own})",
    "cuda": "On one H200, 12 such estimates (by the replay before `Link.on_compute`) were "
            "within 17.7% (p90) of concurrent runs"}
_CPU_FIGURES = {"own": "1.7-3.8%", "shared": "12-16%", "high": "7-8%"}


def stage_times_sentence(n: int, drawn: int, extra, device: str = "cpu") -> str:
    """The caption for ``n`` of ``drawn`` points whose throughput was replayed from their
    stages' own times (``isolation stage``), naming the link the sweep recorded for it
    (``extra``: the sweep's unknown keys; its ``mcap.core.stagetime.KEY``, data checked)
    and how far such estimates landed on ``device``."""
    from mcap.core import stagetime
    link = stagetime.link_from_json((extra or {}).get(stagetime.KEY))
    over = (f" over the link measured on the machine ({stagetime.describe(link)})"
            if link is not None else "")
    key = device if device in _STAGE_TIMES_ERROR else "cpu"
    if key == "cpu" and link is not None:
        key = "cpu-shared" if link.slots else "cpu-own"
    error = _STAGE_TIMES_ERROR[key].format(**_CPU_FIGURES)
    return (f"{n:,} of the {drawn:,} points drawn have a throughput **estimated** (hollow) from "
            "their stages' own times, each stage run alone as the sweep measured its memory, "
            f"replayed in the schedule's order{over}; no run of them with the data flowing was "
            f"timed. {error} (BENCHMARKS.md); `--isolation pipeline` times every run together "
            "instead.")


def throughput_notes(sweep, points: pd.DataFrame, estimate, show_all: bool) -> list[str]:
    """The captions under the partition space's figures on what its throughputs rest on:
    composed runs (stage reuse) and whether they have one (``estimate``: the per-layer model,
    ``mcap.core.throughput``; ``show_all``: every composed run drawn with it, else the picks
    and the lowest peak), and the points replayed from stages run alone
    (:func:`stage_times_sentence`). ``points``: :func:`space_points` of ``sweep.runs``."""
    notes = []
    ok = [r for r in sweep.runs if r.status == "ok" and getattr(r, "composed", False)]
    # composed runs of stages run alone have a throughput replayed from those stages' times
    # (the last note says so); the others have none of their own
    bare = sum(1 for r in ok if r.samples_per_second is None)

    def reuse(n: int) -> str:
        return (f"{n:,} of these partitionings were composed from the stages of measured ones "
                "(stage reuse: exact per-stage peaks")
    if ok and not bare:
        notes.append(reuse(len(ok)) + ").")
    elif bare and estimate is not None:
        drawn = int((points["basis"] == PER_LAYER).sum())
        shown = ("" if show_all else
                 f" The scatter draws {drawn:,} of them (the picks and the lowest peak); the "
                 "sidebar draws them all.")
        notes.append(reuse(bare) + ", no measured throughput). Their throughput "
                     "is **estimated** (hollow points) from per-layer times through GPipe's "
                     f"bubble model, scaled on the {estimate.n:,} measured runs; on those it is "
                     f"off by {100 * estimate.p50:.0f}% (median) and {100 * estimate.p90:.0f}% "
                     "(p90), so read their height as a rough guide, their peak as exact."
                     + shown)
    elif bare:
        notes.append(reuse(bare) + ", no measured throughput). They count in the "
                     "ranks and the error histogram below; the scatter shows the "
                     f"{len(points):,} whose throughput is known, so a pick among the composed "
                     "ones has its rank in the table but no star.")
    alone = int((points["basis"] == STAGE_TIMES).sum())
    if alone:
        notes.append(stage_times_sentence(alone, len(points), sweep.extra, sweep.setup.device))
    return notes


def draw_space(points: pd.DataFrame, selected: Optional[str] = None, dataset: str = "") -> go.Figure:
    """Scatter (x: peak, y: samples/s), the Pareto front as a line, marks as large symbols.
    Trace 0 holds every point so a selection's point_index is a row of ``points``.

    Several picks on one partitioning stay visible: each later star is drawn smaller on top
    of the earlier ones, and every star's hover names all the picks at its spot."""
    unit = unit_for(points["peak"])
    x = scaled(points["peak"], unit)
    fig = go.Figure()
    estimated = points["estimated"] if "estimated" in points else pd.Series(False, index=points.index)
    fig.add_scatter(x=x, y=points["samples_per_second"],
                    mode="markers", name="measured partitionings" + (
                        " (hollow: throughput estimated)" if estimated.any() else ""),
                    customdata=list(zip(points["balance"], points["basis"].map(_HOVER))),
                    marker=dict(size=7, color="#1f77b4", opacity=0.55,
                                symbol=["circle-open" if e else "circle" for e in estimated]),
                    hovertemplate="%{customdata[0]}<br>%{x:.1f} " + unit[0]
                                  + " · %{y:.2f} samples/s%{customdata[1]}<extra></extra>")
    front = points[points["pareto"]].sort_values("peak")
    fig.add_scatter(x=scaled(front["peak"], unit), y=front["samples_per_second"],
                    mode="lines", name="Pareto front", line=dict(color="#444", dash="dot"),
                    hoverinfo="skip", cliponaxis=False)
    labels = sorted({lab for cell in points["marks"] if cell for lab in cell.split(", ")})
    for label in labels:
        rows = points[points["marks"].str.split(", ").apply(lambda labs: label in labs)]
        # a star shared with picks drawn before it at the same point is smaller, on top
        order = [sorted(cell.split(", ")).index(label) for cell in rows["marks"]]
        fig.add_scatter(x=scaled(rows["peak"], unit), y=rows["samples_per_second"],
                        mode="markers", name=method_label(label),
                        customdata=rows[["balance", "marks"]],
                        cliponaxis=False,
                        marker=dict(size=[max(26 - 8 * i, 10) for i in order], symbol="star",
                                    color=method_color(label, "#000"),
                                    line=dict(width=1.5, color="black")),
                        hovertemplate="%{customdata[0]}: picked by %{customdata[1]}<extra></extra>")
    _name_picks(fig, points[points["marks"] != ""], unit, (max(x) - min(x)) if x else 1.0)
    if selected is not None:
        rows = points[points["balance"] == selected]
        fig.add_scatter(x=scaled(rows["peak"], unit), y=rows["samples_per_second"],
                        mode="markers", name=f"selected {selected}", hoverinfo="skip",
                        cliponaxis=False,
                        marker=dict(size=28, symbol="circle-open", color="black", line=dict(width=3)))
    _pad(fig, x, list(points["samples_per_second"]))
    fig.update_layout(xaxis_title=f"peak memory of the fullest device ({unit[0]})",
                      yaxis_title="throughput (samples/s)", clickmode="event+select")
    finish(fig, "Partition space: peak memory vs throughput of every measured partitioning",
           dataset, legend=False)
    # the picks make a long legend: below the plot it wraps into rows without running into
    # the title (above it, in a narrow column, it covered the subtitle)
    fig.update_layout(legend=dict(orientation="h", x=0, xanchor="left", y=-0.26, yanchor="top"),
                      margin=dict(b=70))
    return fig


def _name_picks(fig: go.Figure, starred: pd.DataFrame, unit, span: float) -> None:
    """Every pick named beside its star, so none hides under another: a label on an arrow,
    raised a row above any label close to it (side by side they ran into each other, issue
    40 item 13)."""
    sx, sy = scaled(starred["peak"], unit), list(starred["samples_per_second"])
    for px, py, cell, level in zip(sx, sy, starred["marks"], label_levels(sx, span)):
        fig.add_annotation(x=px, y=py, text=", ".join(method_label(m) for m in cell.split(", ")),
                           showarrow=True, arrowhead=0, arrowwidth=1, arrowcolor="#666",
                           ax=18, ay=-26 - 20 * level, xanchor="left", font=dict(size=12),
                           bgcolor="rgba(255,255,255,0.8)")


# How close two picks' labels may be before one goes a row up: a label of about 20
# characters is about this share of a chart's width.
LABEL_WIDTH = 0.22


def label_levels(xs: list, span: float) -> list[int]:
    """A row for each pick's label, 0 next to the star: a label whose star is within
    LABEL_WIDTH x ``span`` of an earlier one's (left to right) takes the lowest row none of
    those uses, so no two labels share a row where they would overlap."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    levels = [0] * len(xs)
    for n, i in enumerate(order):
        near = {levels[j] for j in order[:n] if abs(xs[i] - xs[j]) < LABEL_WIDTH * (span or 1.0)}
        levels[i] = next(k for k in range(len(xs) + 1) if k not in near)
    return levels


def _pad(fig: go.Figure, x: list, y: list) -> None:
    """Axis ranges with 5% room, so stars and the Pareto line at the edges are not clipped."""
    for axis, vals in (("xaxis", x), ("yaxis", y)):
        vals = [v for v in vals if v is not None]
        if vals:
            low, high = min(vals), max(vals)
            room = 0.05 * (high - low or abs(high) or 1)
            fig.update_layout({f"{axis}_range": [low - room, high + room]})


@dataclass(frozen=True)
class ErrorStats:
    """Relative prediction error (predicted - measured) / measured over the ok runs."""
    balances: tuple[tuple[int, ...], ...]
    errors: tuple[float, ...]
    p90: Optional[float]             # 90th percentile of |error|
    within_paper: Optional[float]    # share of runs with |error| <= 14%
    paper: float = PAPER_ERROR

    @property
    def count(self) -> int:
        return len(self.errors)


def error_stats(runs: tuple[Run, ...], predictions: tuple[Prediction, ...]) -> ErrorStats:
    """Match runs to predictions by balance; runs without a prediction are left out."""
    pred = {tuple(p.balance): p.peak for p in predictions}
    pairs = [(tuple(r.balance), (pred[tuple(r.balance)] - r.peak) / r.peak) for r in runs
             if r.status == "ok" and r.peaks and r.peak > 0 and tuple(r.balance) in pred]
    if not pairs:
        return ErrorStats((), (), None, None)
    balances, errors = zip(*pairs)
    absolute = sorted(abs(e) for e in errors)
    # the one percentile definition, so this page and `python -m mcap evaluate` agree
    p90 = percentile(absolute, 90)
    within = sum(1 for e in absolute if e <= PAPER_ERROR) / len(absolute)
    return ErrorStats(tuple(balances), tuple(errors), p90, within)


@dataclass(frozen=True)
class ErrorView:
    """Where the error histogram looks (issue 40, item 10): its x range (percent) zoomed to
    the errors and their ±p90, the width of a bin, and whether the paper's ±14% lies in
    that range (else it is written, not drawn: drawn, it set a ±14% axis on which errors of
    0.1% were one hairline bar)."""
    low: float
    high: float
    bin_size: float
    paper_drawn: bool


BINS = 30  # about this many bins over the zoomed range


def error_view(stats: ErrorStats) -> ErrorView:
    """The zoomed range of :func:`draw_errors` (percent), from the errors themselves."""
    values = [100 * e for e in stats.errors]
    p90 = 100 * (stats.p90 or 0.0)
    low, high = min(values + [-p90]), max(values + [p90])
    span = (high - low) or max(abs(high), 0.01)
    low, high = low - 0.08 * span, high + 0.08 * span
    paper = 100 * stats.paper
    return ErrorView(low, high, (high - low) / BINS, -paper >= low and paper <= high)


def draw_errors(stats: ErrorStats, dataset: str = "") -> go.Figure:
    """The relative errors as a histogram zoomed to them, ±p90 as dashed lines, and the
    paper's ±14% drawn when it falls in view, else written in the corner."""
    view = error_view(stats)
    fig = go.Figure()
    fig.add_histogram(x=[100 * e for e in stats.errors], name="partitionings",
                      xbins=dict(start=view.low, end=view.high, size=view.bin_size),
                      marker=dict(color="#4c78a8", line=dict(color="white", width=0.5)),
                      hovertemplate="%{x}%: %{y} partitionings<extra></extra>")
    # Label only the right-hand line of each pair: a vline given annotation_text=None
    # draws plotly's "new text" placeholder.
    if stats.p90 is not None:
        fig.add_vline(x=-100 * stats.p90, line_color="black", line_dash="dash")
        fig.add_vline(x=100 * stats.p90, line_color="black", line_dash="dash",
                      annotation_text=f"90% within ±{100 * stats.p90:.2g}%",
                      annotation_position="top left")
    paper = 100 * stats.paper
    if view.paper_drawn:
        fig.add_vline(x=-paper, line_color="red", line_dash="dot")
        fig.add_vline(x=paper, line_color="red", line_dash="dot",
                      annotation_text=f"paper: 90% within ±{paper:.0f}%",
                      annotation_position="bottom right")
    else:
        fig.add_annotation(text=f"paper: 90% within ±{paper:.0f}% (off this scale)",
                           xref="paper", yref="paper", x=1, y=1, xanchor="right",
                           yanchor="bottom", showarrow=False, font=dict(color="#c0392b"))
    fig.update_layout(xaxis_title="relative error of predicted peak (%)", yaxis_title="partitionings",
                      showlegend=False, xaxis_range=[view.low, view.high], bargap=0.05)
    return finish(fig, "Prediction error of the fullest device's peak",
                  dataset, legend=False)
