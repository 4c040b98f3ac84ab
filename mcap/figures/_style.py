"""Shared look of the drawings: one unit rule, one palette, one presentation finish (one
place, so every page, the report and the exported PNGs agree)."""
from __future__ import annotations

from typing import Iterable, Optional

import pandas as pd

from mcap.core.units import fmt_bytes  # noqa: F401  (the one way to write bytes in text)

MIB = 1024 * 1024
GIB = 1024 * MIB

def method_color(name: str, default: str = "#1f77b4") -> str:
    """The chart colour a registered method carries (search methods, mesh searches, MPress
    planners; ``color`` on its class), the same on every page; ``default`` otherwise.
    ``mcap``, the scaling experiment's partitioner, draws in its search method's colour."""
    from mcap.core import search
    from mcap.core.capture import meshsearch
    from mcap.core.press import base as planners
    from mcap.core.scaling import MCAP
    name = search.DEFAULT if name == MCAP else name
    for registry in (search.REGISTRY, meshsearch.REGISTRY, planners.REGISTRY):
        found = registry.find(name)
        if found is not None:
            return found.color
    return default


def method_label(name: str) -> str:
    """The plain name a chart or a table shows for a registered method (its ``label``:
    "mCAP (exact)", "even split", "balanced by parameters", "Bayesian search"; mesh searches
    and MPress planners too), the name itself otherwise. ``mcap``, the scaling experiment's
    partitioner, is "mCAP". Tooltips and exports keep the name (issue 40, item 12)."""
    from mcap.core import search
    from mcap.core.capture import meshsearch
    from mcap.core.press import base as planners
    from mcap.core.scaling import MCAP
    if name == MCAP:
        return "mCAP"
    for registry in (search.REGISTRY, planners.REGISTRY, meshsearch.REGISTRY):
        found = registry.find(name)
        if found is not None and found.label:
            return found.label
    return str(name)


# Columns whose values are method names: tables on screen show their labels.
METHOD_COLUMNS = ("method", "partitioner", "planner")


# One colour per device (stage), the same on every figure that separates devices.
DEVICE_COLORS = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2",
                 "#ff9da6", "#9d755d", "#bab0ac", "#eeca3b")
# What a figure exported from the mode bar looks like on a slide (16:9, twice the pixels).
EXPORT = {"format": "png", "width": 1280, "height": 720, "scale": 2}
# System fonts only. Without a family the dashboard draws charts in its web font, but a PNG
# export renders the chart as an image that cannot use web fonts: the text came out in a
# wider fallback font and the legend, sized for the narrower one, cut its last label.
FONT = "Arial, 'Liberation Sans', Helvetica, sans-serif"
# The chart toolbar (plotly's mode bar) sits in the top right corner, about this tall: a
# title starts below it, so a long title in a narrow column is never covered.
MODEBAR = 30


def device_color(d: int) -> str:
    return DEVICE_COLORS[d % len(DEVICE_COLORS)]


def mib(n: int | float | None) -> float | None:
    """Bytes to MiB; None stays None (not measured)."""
    return None if n is None else n / MIB


def unit_for(values: Iterable) -> tuple[str, int]:
    """The unit a figure or table shows its bytes in: GiB once the largest value reaches
    2 GiB, else MiB (auto MiB/GiB, one rule everywhere)."""
    top = max((abs(int(v)) for v in values if v is not None and not pd.isna(v)), default=0)
    return ("GiB", GIB) if top >= 2 * GIB else ("MiB", MIB)


def scaled(values: Iterable, unit: tuple[str, int]) -> list:
    return [None if v is None or pd.isna(v) else int(v) / unit[1] for v in values]


MISSING = "–"  # what a table shows for a value that is not there (not measured, no rank)


def table_view(frame: pd.DataFrame, columns: Iterable[str]) -> pd.DataFrame:
    """A table for the screen: the byte ``columns`` in the auto unit (one unit for the whole
    table), renamed ``"name (MiB)"``; method names as their labels (:data:`METHOD_COLUMNS`);
    a column with missing values shows them as
    :data:`MISSING` (the dashboard's tables drew Python's ``None``). Downloads keep the raw
    frame, in bytes."""
    columns = [c for c in columns if c in frame.columns]
    unit = unit_for(v for c in columns for v in frame[c])
    out = frame.copy()
    for c in METHOD_COLUMNS:  # plain names on screen; the download keeps the code names
        if c in out.columns:
            out[c] = [method_label(v) for v in out[c]]
    for c in columns:
        out[c] = pd.array([None if v is None else round(v, 2) for v in scaled(frame[c], unit)],
                          dtype="Float64")
    for c in out.columns:
        missing = out[c].isna()
        if missing.any() and not missing.all():
            out[c] = [MISSING if m else (f"{v:.2f}" if c in columns else str(v))
                      for v, m in zip(out[c], missing)]
        elif missing.all():
            out[c] = MISSING
    return out.rename(columns={c: f"{c} ({unit[0]})" for c in columns})


def balance_str(balance) -> str:
    """(3, 3, 5, 19) -> '3-3-5-19', as the paper writes partitionings."""
    return "-".join(str(int(n)) for n in balance)


def finish(fig, title: str, dataset: Optional[str] = None, legend: bool = True):
    """Presentation finish: a title saying what the figure shows (and for which dataset, as
    a subtitle), the legend above the plot and clear of the axis titles, room for both."""
    fig.update_layout(
        title=dict(text=title, subtitle=dict(text=dataset or ""), x=0.01, xanchor="left",
                   y=1, yref="container", yanchor="top", pad=dict(t=MODEBAR)),
        margin=dict(t=(110 if legend else 80) + MODEBAR - 8, l=70, r=30, b=60),
        legend=dict(orientation="h", x=0, xanchor="left", y=1.0, yanchor="bottom"),
        font=dict(size=13, family=FONT))
    return fig


def for_dataset(fig, dataset: str):
    """Put the dataset's name under the figure's title (pages know which dataset it is)."""
    fig.update_layout(title_subtitle_text=dataset)
    return fig
