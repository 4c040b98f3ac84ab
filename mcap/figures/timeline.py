"""Drawing the teaching view's simulation (data: ``mcap.core.timeline.simulate``): which
micro-batch each device works on at each step, and its memory level."""
from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from mcap.figures._style import MODEBAR, device_color, finish, scaled, unit_for
from mcap.core.timeline import Timeline


def ops_frame(t: Timeline) -> pd.DataFrame:
    """One row per action: device, stage (torch's stage index), kind (F, B, I, W),
    micro-batch, start, end."""
    return pd.DataFrame([(o.device, o.chunk, o.kind, o.microbatch, o.start, o.end) for o in t.ops],
                        columns=["device", "stage", "kind", "microbatch", "start", "end"])


def held_text(t: Timeline, pairs) -> str:
    """(stage, micro-batch) pairs for a table cell: "0 1 2" on a device of one stage,
    "0 1 @0 · 3 @4" (micro-batches @ stage) on one of several."""
    if t.virtual == 1:
        return " ".join(str(m) for _, m in pairs)
    by: dict = {}
    for c, m in pairs:
        by.setdefault(c, []).append(str(m))
    return " · ".join(f"{' '.join(ms)} @{c}" for c, ms in sorted(by.items()))


def memory_frame(t: Timeline) -> pd.DataFrame:
    """One row per device and step: micro-batches held (as text), how many, memory bytes."""
    rows = [(d, step, held_text(t, held), len(held), t.memory[d][step])
            for d in range(t.stages) for step, held in enumerate(t.held[d])]
    return pd.DataFrame(rows, columns=["device", "step", "held", "in_flight", "memory"])


def step_frame(t: Timeline, step: int) -> pd.DataFrame:
    """The time cursor's table: per device at ``step``, what it runs, the micro-batches it
    holds (and, under a split backward, those waiting for their W) and its level in bytes."""
    rows = []
    for d in range(t.stages):
        running = " ".join(f"{o.label}" + (f" @{o.chunk}" if t.virtual > 1 else "")
                           for o in t.running(d, step)) or "idle"
        waiting = t.waiting[d][step] if t.waiting else ()
        rows.append((d, running, held_text(t, t.held[d][step]), len(t.held[d][step]),
                     held_text(t, waiting), t.memory[d][step]))
    frame = pd.DataFrame(rows, columns=["device", "runs", "holds", "in_flight",
                                        "waiting for W", "memory"])
    if not any(o.kind == "I" for o in t.ops):
        frame = frame.drop(columns=["waiting for W"])
    return frame


OPACITY = {"F": 1.0, "B": 0.45, "I": 0.65, "W": 0.3}


def _op_boxes(fig, t: Timeline, devices, row: int) -> None:
    """The schedule: one row per device, a box per action labelled F3/B3/I3/W3 in the
    device's own colour (one colour set: devices, as in the memory panel and on every page);
    backwards lighter than forwards, a device's second stage hatched. One trace per device,
    kind and stage, so a long list draws quickly."""
    groups: dict = {}
    for o in t.ops:
        if o.device in devices:
            local = t.chunk_of_device(o.device).index(o.chunk) if t.placement else 0
            groups.setdefault((o.device, o.kind, local), []).append(o)
    for (d, kind, local), ops in sorted(groups.items()):
        where = [f"stage {o.chunk}, " if t.virtual > 1 else "" for o in ops]
        fig.add_bar(x=[o.end - o.start for o in ops], base=[o.start for o in ops],
                    y=[f"device {d}"] * len(ops), orientation="h",
                    marker=dict(color=device_color(d), opacity=OPACITY.get(kind, 0.5),
                                line=dict(color="black", width=1),
                                pattern=dict(shape="/" if local else "", fgcolor="black",
                                             fgopacity=0.35)),
                    text=[o.label for o in ops], textposition="inside", insidetextanchor="middle",
                    textfont=dict(color="white" if kind == "F" else "black"),
                    customdata=[[w, o.start, o.end] for w, o in zip(where, ops)],
                    showlegend=False,
                    hovertemplate=f"device {d}: " + "%{text} (%{customdata[0]}steps "
                                  "%{customdata[1]}-%{customdata[2]})<extra></extra>",
                    row=row, col=1)


def _cursor(fig, t: Timeline, step: int, unit, levels: bool) -> None:
    """The time cursor: the step shaded, the boxes running then outlined, and each device's
    level then marked on its curve."""
    fig.add_vrect(x0=step, x1=step + 1, fillcolor="#f2cf5b", opacity=0.3, line_width=0,
                  row="all", col=1)
    running = [o for d in range(t.stages) for o in t.running(d, step)]
    if running:
        fig.add_bar(x=[o.end - o.start for o in running], base=[o.start for o in running],
                    y=[f"device {o.device}" for o in running], orientation="h",
                    marker=dict(color="rgba(0,0,0,0)", line=dict(color="#b8860b", width=4)),
                    name=f"running at step {step}", showlegend=False, hoverinfo="skip",
                    row=1, col=1)
    if levels:
        fig.add_scatter(x=[step + 0.5] * t.stages,
                        y=scaled([t.memory[d][step] for d in range(t.stages)], unit),
                        mode="markers", name=f"level at step {step}",
                        marker=dict(size=12, symbol="diamond",
                                    color=[device_color(d) for d in range(t.stages)],
                                    line=dict(color="black", width=1.5)),
                        hovertemplate="step " + str(step) + ": %{y:.1f} " + unit[0]
                                      + "<extra></extra>", row=2, col=1)


def draw_timeline(t: Timeline, dataset: str = "", measured=None, levels: bool = True,
                  label: str = "", measured_label: str = "", cursor=None) -> go.Figure:
    """Top: the schedule, one row per device, a box per action. Bottom (when ``levels``):
    each device's memory level over the same steps, and its measured peak as a dotted line
    where ``measured`` (bytes per device, measured under ``measured_label``) is given.
    ``cursor``: a step to highlight (the step-through)."""
    title = (f"One iteration under {label or t.schedule}: schedule"
             + (" and memory held per device" if levels else " per device")
             + f" ({'-'.join(map(str, t.balance))})")
    unit = unit_for([*(v for lv in t.memory for v in lv), *(measured or ())])
    if not levels:
        fig = make_subplots(rows=1, cols=1)
        _op_boxes(fig, t, range(t.stages), 1)
        if cursor is not None:
            _cursor(fig, t, cursor, unit, False)
        fig.update_yaxes(autorange="reversed")
        fig.update_xaxes(title_text="time step (F = forward, B = backward)")
        fig.update_layout(barmode="overlay", height=80 + 60 * t.stages)
        return finish(fig, title, dataset, legend=False)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        row_heights=[0.45, 0.55],
                        subplot_titles=(_kinds_title(t), "memory held"))
    _op_boxes(fig, t, range(t.stages), 1)
    mem = memory_frame(t)
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
                            name=f"device {d} measured ({measured_label})",
                            legendgroup=f"device {d}",
                            line=dict(color=device_color(d), width=1.5, dash="dot"),
                            hovertemplate=f"device {d} peak measured under {measured_label}: "
                                          + "%{y:.2f} " + unit[0] + "<extra></extra>",
                            row=2, col=1)
    if cursor is not None:
        _cursor(fig, t, cursor, unit, True)
    fig.update_yaxes(autorange="reversed", row=1, col=1)
    fig.update_yaxes(title_text=unit[0], row=2, col=1)
    fig.update_xaxes(title_text="time step", row=2, col=1)
    fig.update_layout(barmode="overlay", height=680)
    finish(fig, title, dataset)
    # the subplot titles sit where a top legend would: the devices' legend goes beside the
    # memory plot instead
    fig.update_layout(legend=dict(orientation="v", x=1.01, xanchor="left", y=0, yanchor="bottom"),
                      margin=dict(t=90 + MODEBAR, r=250 if measured is not None else 130))
    return fig


def _kinds_title(t: Timeline) -> str:
    kinds = sorted({o.kind for o in t.ops}, key="FBIW".index)
    names = {"F": "forward", "B": "backward", "I": "backward for inputs",
             "W": "backward for weights"}
    return ("schedule (" + ", ".join(f"{k} = {names[k]}" for k in kinds) + ")"
            + ("; hatched: a device's later stages" if t.virtual > 1 else ""))


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
