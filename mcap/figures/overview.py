"""The Overview page: a dataset's headline numbers and one picture of what mCAP does
(per-device predicted peaks of a simple split next to mCAP's memory-balanced one)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import method_color, balance_str, finish, scaled, unit_for
from mcap.core.types import Prediction, Profile, Sweep


@dataclass(frozen=True)
class Headline:
    kind: str                # "profile" or "sweep"
    spec: str
    layers: int
    param_bytes: int
    stages: int
    batch_size: int
    chunks: int
    schedule: str
    checkpoint: str
    device: str
    engine: str
    capacity_bytes: Optional[int]
    runs: int
    ok: int
    oom: int
    failed: int
    lowest_peak: Optional[int]                 # lowest measured peak among ok runs
    lowest_balance: Optional[tuple[int, ...]]


def headline(data: Union[Profile, Sweep]) -> Headline:
    ok = [r for r in data.runs if r.status == "ok" and r.peaks]
    best = min(ok, key=lambda r: r.peak, default=None)
    s = data.setup
    return Headline(
        kind="profile" if isinstance(data, Profile) else "sweep", spec=data.model.spec,
        layers=data.model.num_layers, param_bytes=sum(l.param_bytes for l in data.model.layers),
        stages=s.stages, batch_size=s.batch_size, chunks=s.chunks, schedule=s.schedule,
        checkpoint=s.checkpoint, device=s.device, engine=s.engine, capacity_bytes=s.capacity_bytes,
        runs=len(data.runs), ok=len(ok), oom=sum(r.status == "oom" for r in data.runs),
        failed=sum(r.status == "failed" for r in data.runs),
        lowest_peak=None if best is None else best.peak,
        lowest_balance=None if best is None else tuple(best.balance))


def split_bars(named: tuple[tuple[str, Prediction], ...]) -> pd.DataFrame:
    """Long table (label, balance, device, predicted) of several partitionings' per-device peaks."""
    rows = [(label, balance_str(p.balance), d, peak)
            for label, p in named for d, peak in enumerate(p.peaks)]
    return pd.DataFrame(rows, columns=["label", "balance", "device", "predicted"])


def draw_split_bars(frame: pd.DataFrame, dataset: str = "") -> go.Figure:
    unit = unit_for(frame["predicted"])
    fig = go.Figure()
    for label, rows in frame.groupby("label", sort=False):
        fig.add_bar(x=[f"device {d}" for d in rows["device"]], y=scaled(rows["predicted"], unit),
                    name=f"{label} {rows['balance'].iloc[0]}",
                    marker_color=method_color(label, None))
    fig.update_layout(barmode="group", yaxis_title=f"predicted peak ({unit[0]})")
    return finish(fig, "Predicted per-device peaks: " + " vs ".join(frame["label"].unique()),
                  dataset)
