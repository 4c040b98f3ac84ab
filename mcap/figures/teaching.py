"""The teaching view's other figures and tables: each device's number taken apart into mCAP's
statistics (data: ``mcap.core.teachstats.statistics_rows``), and every schedule's in-flight
counts and idle share side by side (data: the schedules' action lists)."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go

from mcap.core.schedules.actions import ActionList, bubble, max_held, replay
from mcap.figures._style import finish, scaled, unit_for

PARTS = (("isolated", "mem_isolated of its first layer", "#4c78a8"),
         ("added", "mem_added of its other layers", "#9ecae9"),
         ("other", "the predictor's once-per-stage terms", "#f58518"))


def stats_frame(rows) -> pd.DataFrame:
    """One row per device: its layers, mem_isolated of the first, the sum of mem_added of
    the others, the predictor's other terms and the number shown, in bytes."""
    return pd.DataFrame([(r.device, f"{r.first}-{r.last}", r.isolated, r.added, r.other,
                          r.predicted) for r in rows],
                        columns=["device", "layers", "isolated", "added", "other", "predicted"])


def draw_stats(rows, dataset: str = "", predictor: str = "") -> go.Figure:
    """Stacked bars per device: mem_isolated of its first layer, mem_added of the rest, and
    what the predictor adds (a negative part takes off); a marker at the number shown."""
    frame = stats_frame(rows)
    unit = unit_for([*frame["isolated"], *frame["predicted"], *(frame["isolated"] + frame["added"])])
    x = [f"device {d}<br>layers {w}" for d, w in zip(frame["device"], frame["layers"])]
    fig = go.Figure()
    for col, name, color in PARTS:
        fig.add_bar(x=x, y=scaled(frame[col], unit), name=name, marker_color=color,
                    hovertemplate=name + ": %{y:.2f} " + unit[0] + "<extra></extra>")
    fig.add_scatter(x=x, y=scaled(frame["predicted"], unit), mode="markers",
                    name=f"the number shown ({predictor})" if predictor else "the number shown",
                    marker=dict(symbol="line-ew", size=40, color="black",
                                line=dict(color="black", width=3)),
                    hovertemplate="shown: %{y:.2f} " + unit[0] + "<extra></extra>")
    fig.update_layout(barmode="relative", height=420)
    fig.update_yaxes(title_text=unit[0])
    return finish(fig, "Each device's number from the profile's per-layer statistics", dataset)


def schedules_frame(lists: dict, labels: dict) -> pd.DataFrame:
    """One row per schedule (``lists``: name -> ActionList, or the McapError saying why it
    cannot run here): its stages per device, the most micro-batches each device holds at
    once and the share of the devices' time idle (unit forwards, backwards of 2), all read
    off its action list."""
    rows = []
    for name, al in lists.items():
        if not isinstance(al, ActionList):
            rows.append((labels.get(name, name), None, "–", None, str(al).split(": ", 1)[-1]))
            continue
        rows.append((labels.get(name, name), al.virtual, " / ".join(map(str, max_held(al))),
                     round(100 * bubble(replay(al), al.stages), 1), ""))
    return pd.DataFrame(rows, columns=["schedule", "stages per device",
                                       "most micro-batches held (per device)", "idle (%)",
                                       "not here because"])
