"""Drawing the teaching view's simulation (data: ``mcap.core.timeline.simulate``): which
micro-batch each device works on at each step, and its memory level."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mcap.figures._style import MODEBAR, device_color, finish, scaled, unit_for
from mcap.core.timeline import Timeline


def ops_frame(t: Timeline) -> pd.DataFrame:
    """One row per forward/backward: device, kind, micro-batch, start, end."""
    return pd.DataFrame([(o.device, o.kind, o.microbatch, o.start, o.end) for o in t.ops],
                        columns=["device", "kind", "microbatch", "start", "end"])


def memory_frame(t: Timeline) -> pd.DataFrame:
    """One row per device and step: micro-batches held (as text), how many, memory bytes."""
    rows = [(d, step, " ".join(str(m) for m in held), len(held), t.memory[d][step])
            for d in range(t.stages) for step, held in enumerate(t.held[d])]
    return pd.DataFrame(rows, columns=["device", "step", "held", "in_flight", "memory"])


def _op_boxes(fig, t: Timeline, devices, row: int) -> None:
    """The schedule: one row per device, a box per op labelled F3/B3 in the device's own
    colour (one colour set: devices, as in the memory panel and on every page); backwards
    lighter than forwards."""
    for o in t.ops:
        if o.device not in devices:
            continue
        fig.add_bar(x=[o.end - o.start], base=[o.start], y=[f"device {o.device}"], orientation="h",
                    marker=dict(color=device_color(o.device), opacity=1.0 if o.kind == "F" else 0.45,
                                line=dict(color="black", width=1)),
                    text=f"{o.kind}{o.microbatch}", textposition="inside", insidetextanchor="middle",
                    textfont=dict(color="white" if o.kind == "F" else "black"),
                    showlegend=False, hovertemplate=f"device {o.device}: {o.kind}{o.microbatch} "
                                                    f"steps {o.start}-{o.end}<extra></extra>",
                    row=row, col=1)


def draw_timeline(t: Timeline, dataset: str = "", measured=None, levels: bool = True) -> go.Figure:
    """Top: the schedule, one row per device, a box per op labelled F3/B3. Bottom (when
    ``levels``): each device's memory level over the same steps, and its measured peak as a
    dotted line where ``measured`` (bytes per device) is given."""
    names = {"gpipe": "GPipe", "1f1b": "1F1B"}
    title = (f"One iteration under {names.get(t.schedule, t.schedule)}: schedule"
             + (" and memory held per device" if levels else " per device")
             + f" ({'-'.join(map(str, t.balance))})")
    if not levels:
        fig = make_subplots(rows=1, cols=1)
        _op_boxes(fig, t, range(t.stages), 1)
        fig.update_yaxes(autorange="reversed")
        fig.update_xaxes(title_text="time step (F = forward, B = backward)")
        fig.update_layout(barmode="overlay", height=80 + 60 * t.stages)
        return finish(fig, title, dataset, legend=False)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.45, 0.55],
                        subplot_titles=("schedule (F = forward, B = backward)", "memory held"))
    _op_boxes(fig, t, range(t.stages), 1)
    mem = memory_frame(t)
    unit = unit_for([*mem["memory"], *(measured or ())])
    for d in range(t.stages):
        rows = mem[mem["device"] == d]
        fig.add_scatter(x=rows["step"], y=scaled(rows["memory"], unit), mode="lines",
                        line_shape="hv", name=f"device {d}", customdata=rows["held"],
                        legendgroup=f"device {d}",
                        line=dict(color=device_color(d), width=3),
                        hovertemplate=f"device {d}" + " step %{x}: %{y:.1f} " + unit[0] + "<br>holds "
                                      "micro-batches %{customdata}<extra></extra>", row=2, col=1)
        if measured is not None:
            fig.add_scatter(x=[0, t.steps], y=scaled([measured[d]] * 2, unit), mode="lines",
                            name=f"device {d} measured peak", legendgroup=f"device {d}",
                            line=dict(color=device_color(d), width=1.5, dash="dot"),
                            hovertemplate=f"device {d} measured peak " + "%{y:.2f} " + unit[0]
                                          + "<extra></extra>", row=2, col=1)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_yaxes(title_text=unit[0], row=2, col=1)
    fig.update_xaxes(title_text="time step", row=2, col=1)
    fig.update_layout(barmode="overlay", height=680)
    finish(fig, title, dataset)
    # the subplot titles sit where a top legend would: the devices' legend goes beside the
    # memory plot instead
    fig.update_layout(legend=dict(orientation="v", x=1.01, xanchor="left", y=0, yanchor="bottom"),
                      margin=dict(t=90 + MODEBAR, r=190 if measured is not None else 110))
    return fig


# Leaving and returning share a technique's colour (mcap.figures.press.ACTION_COLORS):
# down-triangles leave the device, up-triangles come back.
_TECH = {"dropped": "recompute", "recomputed": "recompute", "swap out": "swap",
         "swap in": "swap", "d2d out": "d2d", "d2d in": "d2d"}


def effect_frame(e) -> pd.DataFrame:
    """One row per event of ``mcap.core.press.effect.Effect``: time, layer, micro-batch, what
    happens and the bytes (+ arriving on the stage, - leaving it)."""
    return pd.DataFrame([(ev.time, ev.layer, ev.microbatch, ev.what, ev.nbytes) for ev in e.events],
                        columns=["step", "layer", "microbatch", "event", "bytes"])


def draw_press_effect(t: Timeline, e, dataset: str = "") -> go.Figure:
    """Top: the chosen stage's forwards and backwards with what leaves (down) and returns
    (up) inside them. Bottom: its memory over the iteration without and with the plan."""
    from mcap.figures.press import ACTION_COLORS
    d = e.stage
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1,
                        row_heights=[0.35, 0.65],
                        subplot_titles=(f"device {d}: what leaves (down) and returns (up)",
                                        f"device {d}: memory without and with the plan"))
    _op_boxes(fig, t, (d,), 1)
    frame = effect_frame(e)
    for what, rows in frame.groupby("event", sort=False):
        tech = _TECH.get(what, "d2d")
        down = rows["bytes"].iloc[0] < 0
        fig.add_scatter(x=rows["step"], y=[f"device {d}"] * len(rows), mode="markers",
                        name=what, marker=dict(symbol="triangle-down" if down else "triangle-up",
                                               size=11, color=ACTION_COLORS[tech],
                                               line=dict(color="black", width=1)),
                        customdata=rows[["layer", "microbatch", "bytes"]].to_numpy(),
                        hovertemplate=what + ": layer %{customdata[0]}, micro-batch "
                                      "%{customdata[1]}, %{customdata[2]:,} bytes<extra></extra>",
                        row=1, col=1)
    unit = unit_for([*e.without, *e.with_plan])
    fig.add_scatter(x=list(e.times), y=scaled(e.without, unit), mode="lines", line_shape="hv",
                    name="without the plan", line=dict(color="#bab0ac", width=3, dash="dot"),
                    row=2, col=1)
    fig.add_scatter(x=list(e.times), y=scaled(e.with_plan, unit), mode="lines", line_shape="hv",
                    name="with the plan", line=dict(color=device_color(d), width=3), row=2, col=1)
    fig.update_yaxes(showticklabels=False, row=1, col=1)
    fig.update_yaxes(title_text=unit[0], row=2, col=1)
    fig.update_xaxes(title_text="time step", row=2, col=1)
    fig.update_layout(barmode="overlay", height=560)
    finish(fig, f"A memory-saving plan on device {d} over one iteration "
                f"({'-'.join(map(str, t.balance))})", dataset)
    fig.update_layout(legend=dict(orientation="v", x=1.01, xanchor="left", y=0, yanchor="bottom"),
                      margin=dict(t=90 + MODEBAR, r=150))
    return fig


def measured_frame(evs) -> pd.DataFrame:
    """One row per measured event (``mcap.core.memtimeline.events``): device, its order on
    the device, iteration, the op's label and kind, and bytes before, peak inside, after."""
    rows = [(e.device, e.order, e.iteration + 1, e.label, e.kind, e.before, e.peak, e.after)
            for dev in evs for e in dev]
    return pd.DataFrame(rows, columns=["device", "order", "iteration", "op", "kind", "before",
                                       "peak", "after"])


def draw_measured(evs, dataset: str = "", balance=()) -> go.Figure:
    """Each device's measured memory, op by op in the order it ran them (both iterations):
    a line through the bytes held after each op and a marker at the peak inside it."""
    frame = measured_frame(evs)
    unit = unit_for(frame["peak"])
    fig = go.Figure()
    for d, rows in frame.groupby("device", sort=True):
        ops = rows[rows["kind"] != "-"]
        text = [f"it {i} {op}" for i, op in zip(rows["iteration"], rows["op"])]
        fig.add_scatter(x=rows["order"], y=scaled(rows["after"], unit), mode="lines",
                        line_shape="hv", name=f"device {d} held", legendgroup=f"device {d}",
                        line=dict(color=device_color(d), width=3), text=text,
                        hovertemplate=f"device {d} " + "%{text}: %{y:.2f} " + unit[0]
                                      + " held after<extra></extra>")
        fig.add_scatter(x=ops["order"], y=scaled(ops["peak"], unit), mode="markers",
                        name=f"device {d} peak inside", legendgroup=f"device {d}",
                        marker=dict(color=device_color(d), symbol="triangle-up", size=9,
                                    line=dict(color="black", width=1)),
                        text=[f"it {i} {op}" for i, op in zip(ops["iteration"], ops["op"])],
                        hovertemplate=f"device {d} " + "%{text}: peak %{y:.2f} " + unit[0]
                                      + "<extra></extra>")
    fig.update_yaxes(title_text=unit[0])
    fig.update_xaxes(title_text="ops in the order each device ran them (two iterations)")
    fig.update_layout(height=440)
    finish(fig, "Measured memory per device, op by op"
                + (f" ({'-'.join(map(str, balance))})" if balance else ""), dataset)
    fig.update_layout(legend=dict(orientation="v", x=1.01, xanchor="left", y=0, yanchor="bottom"),
                      margin=dict(t=90 + MODEBAR, r=190))
    return fig
