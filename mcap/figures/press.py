"""The Memory savers page's data and drawings (MPress II-III): each device's predicted peak
before and after a plan, with the bytes each technique frees, and the plan as a layer x
stage grid. Data functions return DataFrames in bytes; draw functions show the auto unit."""
from __future__ import annotations

from typing import Optional

import pandas as pd
import plotly.graph_objects as go

from mcap.core.press import Problem, outcome
from mcap.core.press.actions import PressPlan
from mcap.figures._style import balance_str, finish, scaled, unit_for

# One colour per action, the same in the bars and the grid.
ACTION_COLORS = {"keep": "#d9d9d9", "recompute": "#e45756", "swap": "#4c78a8", "d2d": "#54a24b"}
ACTION_CODES = {"keep": ".", "recompute": "R", "swap": "S", "d2d": "D"}


def _actions(plan: PressPlan) -> list:
    return [a for stage in plan.stages for a in stage]


def savers_table(p: Problem, plan: PressPlan) -> pd.DataFrame:
    """One row per device, at the moment its peak falls under the plan
    (``mcap.core.press.model``: the stage's iteration event by event): keep-all peak, peak
    after the plan, how much lower keep-all stood at that moment ("lower then": the plan
    moves the peak), the bytes each technique has away then, what the device holds for its
    peers (d2d received), the reduced bytes back then (a swapped layer in its backward, a
    recompute run) and the bytes a recompute segment's input keeps although their owner is
    reduced. before - lower then - freed + back + received + segment = after."""
    o = outcome(p, _actions(plan))
    rows = []
    for s in range(p.stages):
        first = sum(p.balance[:s])
        rows.append({"device": s, "layers": f"{first}-{first + p.balance[s] - 1}",
                     "before": p.base[s], "after": o.peaks[s],
                     "recompute": o.freed[s]["recompute"], "swap": o.freed[s]["swap"],
                     "d2d": o.freed[s]["d2d"], "received": o.received[s],
                     "transient": o.transient[s],
                     "segment": o.pinned[s] if o.pinned else 0,
                     "lower then": o.shift[s] if o.shift else 0})
    return pd.DataFrame(rows)


def draw_savers(table: pd.DataFrame, capacity: Optional[int], balance, dataset: str = "") -> go.Figure:
    """Per device two stacked bars: before (kept + what each technique frees, coloured by
    technique, + how much lower keep-all stood when the plan peaks) and after (kept + the
    reduced bytes back in backward + bytes held for peers + segment inputs)."""
    freed = table["recompute"] + table["swap"] + table["d2d"]
    lower = table["lower then"] if "lower then" in table else 0 * freed
    kept = table["before"] - freed - lower
    unit = unit_for([*table["before"], *table["after"], capacity])
    x = [[f"device {d}" for d in table["device"] for _ in (0, 1)],
         ["before", "after"] * len(table)]

    def pair(before, after):
        return scaled([v for b, a in zip(before, after) for v in (b, a)], unit)

    zero = [0] * len(table)
    fig = go.Figure()
    fig.add_bar(x=x, y=pair(kept, kept), name="kept", marker_color="#bab0ac")
    for tech, label in (("recompute", "freed by recompute"), ("swap", "freed by host swap"),
                        ("d2d", "freed by d2d swap")):
        fig.add_bar(x=x, y=pair(table[tech], zero), name=label, marker_color=ACTION_COLORS[tech],
                    marker_pattern_shape="/")
    if lower.any():
        fig.add_bar(x=x, y=pair(lower, zero), name="keep-all lower when the plan peaks",
                    marker_color="#d4d4d4", marker_pattern_shape=".")
    fig.add_bar(x=x, y=pair(zero, table["transient"]), name="back in backward",
                marker_color="#eeca3b")
    fig.add_bar(x=x, y=pair(zero, table["received"]), name="held for peers (d2d)",
                marker_color="#2f7d32")
    if "segment" in table and table["segment"].any():
        fig.add_bar(x=x, y=pair(zero, table["segment"]), name="kept as a recompute input",
                    marker_color="#9d755d")
    if capacity is not None:
        # red on white: where a bar reaches the line, a grey label on it could not be read
        fig.add_hline(y=capacity / unit[1], line_dash="dash", line_color="red",
                      annotation_text=f"capacity {capacity / unit[1]:.1f} {unit[0]}",
                      annotation_position="top left",
                      annotation=dict(font=dict(color="#b71c1c"), bgcolor="white",
                                      bordercolor="#b71c1c", borderwidth=1, borderpad=2))
    fig.update_layout(barmode="stack", yaxis_title=f"predicted peak ({unit[0]})")
    return finish(fig, f"Per-device peak before and after the plan, partitioning "
                       f"{balance_str(balance)}", dataset)


# The columns every device's row has something to say in; the others are shown only when
# some device has bytes there (the download has them all).
_ALWAYS = ("device", "layers", "before", "after")


def screen_table(table: pd.DataFrame) -> pd.DataFrame:
    """:func:`savers_table` for the page: its columns that are zero on every device left
    out (eleven columns ran past the right edge at 1280 px, issue 40 item 13)."""
    keep = [c for c in table.columns if c in _ALWAYS or bool(table[c].astype(bool).any())]
    return table[keep]


def plan_grid(plan: PressPlan) -> pd.DataFrame:
    """Rows are stages, columns layers; a cell is the layer's action on its own stage
    ("d2d->3" names the target), empty where the layer is on another stage."""
    L = sum(plan.balance)
    rows = []
    for s, stage in enumerate(plan.stages):
        row = {f"{l}": "" for l in range(L)}
        for a in stage:
            row[f"{a.layer}"] = f"d2d->{a.target}" if a.action == "d2d" else a.action
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.index = [f"stage {s}" for s in range(len(plan.stages))]
    return frame


def draw_plan_grid(plan: PressPlan, dataset: str = "") -> go.Figure:
    """The plan as a layer x stage grid, one colour per action, d2d cells naming the target."""
    order = list(ACTION_COLORS)
    L, G = sum(plan.balance), len(plan.stages)
    z = [[None] * L for _ in range(G)]
    text = [[""] * L for _ in range(G)]
    for s, stage in enumerate(plan.stages):
        for a in stage:
            z[s][a.layer] = order.index(a.action)
            text[s][a.layer] = f"→{a.target}" if a.action == "d2d" else ACTION_CODES[a.action]
    n = len(order)
    scale = []
    for i, name in enumerate(order):
        scale += [[i / n, ACTION_COLORS[name]], [(i + 1) / n, ACTION_COLORS[name]]]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(L)), y=[f"stage {s}" for s in range(G)], text=text,
        texttemplate="%{text}", colorscale=scale, zmin=-0.5, zmax=n - 0.5, xgap=1, ygap=1,
        colorbar=dict(tickvals=list(range(n)), ticktext=order, title="action"),
        hovertemplate="layer %{x} on %{y}: %{text}<extra></extra>"))
    fig.update_layout(xaxis_title="layer", yaxis_autorange="reversed")
    counts = plan.counts()
    return finish(fig, "The plan: what happens to each layer's saved activations ("
                       + ", ".join(f"{counts[k]} {k}" for k in order) + ")", dataset, legend=False)
