"""Per-device peaks of one partitioning: predicted bars (paper 3.3), measured markers where
the store has a run, and the capacity line."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import plotly.graph_objects as go

from mcap.core.errors import McapError
from mcap.figures._style import balance_str, device_color, finish, scaled, unit_for
from mcap.core.types import Prediction, Run


@dataclass(frozen=True)
class DeviceBars:
    balance: tuple[int, ...]
    layers: tuple[str, ...]              # "0-2", "3-5", ... per device
    predicted: tuple[int, ...]
    measured: Optional[tuple[int, ...]]  # None when not measured (or the run was not ok)
    measured_status: Optional[str]       # "ok" / "oom" / "failed" / None
    capacity: Optional[int]

    @property
    def over_capacity(self) -> tuple[int, ...]:
        """Devices whose predicted peak exceeds the capacity."""
        if self.capacity is None:
            return ()
        return tuple(i for i, p in enumerate(self.predicted) if p > self.capacity)


def device_bars(prediction: Prediction, run: Optional[Run] = None,
                capacity: Optional[int] = None) -> DeviceBars:
    if run is not None and tuple(run.balance) != tuple(prediction.balance):
        raise McapError(f"run of {balance_str(run.balance)} does not match prediction of "
                        f"{balance_str(prediction.balance)}")
    layers, start = [], 0
    for n in prediction.balance:
        layers.append(f"{start}-{start + n - 1}")
        start += n
    measured = tuple(run.peaks) if run is not None and run.status == "ok" and run.peaks else None
    return DeviceBars(tuple(prediction.balance), tuple(layers), tuple(prediction.peaks), measured,
                      None if run is None else run.status, capacity)


def draw_device_bars(data: DeviceBars, title: str = "", dataset: str = "") -> go.Figure:
    """Bars in the devices' own colours (the same on every page), measured as diamonds."""
    devices = [f"device {i}" for i in range(len(data.balance))]
    unit = unit_for([*data.predicted, *(data.measured or ()), data.capacity])
    fig = go.Figure()
    fig.add_bar(x=devices, y=scaled(data.predicted, unit), name="predicted",
                customdata=data.layers,
                marker_color=[device_color(i) for i in range(len(devices))],
                hovertemplate="layers %{customdata}<br>predicted %{y:.1f} " + unit[0] + "<extra></extra>")
    if data.measured is not None:
        fig.add_scatter(x=devices, y=scaled(data.measured, unit), name="measured",
                        mode="markers", marker=dict(symbol="diamond", size=14, color="black"),
                        hovertemplate="measured %{y:.1f} " + unit[0] + "<extra></extra>")
    if data.capacity is not None:
        fig.add_hline(y=data.capacity / unit[1], line_dash="dash", line_color="red",
                      annotation_text=f"capacity {data.capacity / unit[1]:.1f} {unit[0]}")
    fig.update_layout(yaxis_title=f"peak memory ({unit[0]})")
    return finish(fig, title or f"Per-device peak memory of partitioning {balance_str(data.balance)}",
                  dataset)


def device_table(data: DeviceBars):
    """The bars as a table: device, its layers, predicted and measured bytes, over capacity."""
    import pandas as pd
    measured = data.measured or (None,) * len(data.balance)
    frame = pd.DataFrame({
        "device": range(len(data.balance)), "layers": data.layers, "predicted": data.predicted,
        "measured": pd.array(measured, dtype="Int64"),
        "over_capacity": [i in data.over_capacity for i in range(len(data.balance))]})
    return frame
