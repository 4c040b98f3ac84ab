"""The Overview page: a dataset's headline numbers and one picture of what mCAP does
(per-device predicted peaks of a simple split next to mCAP's memory-balanced one)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import pandas as pd
import plotly.graph_objects as go

from mcap.figures._style import (
    balance_str, finish, fmt_bytes, method_color, method_label, scaled, unit_for,
)
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


@dataclass(frozen=True)
class SplitGain:
    """What mCAP's split does to the fullest device against an even split of the layers:
    the Overview's "vs. an even split" and Present's headline are this one computation
    (issue 40, item 11). Peaks in bytes; ``measured``: both were measured (a sweep holds
    both partitionings), else both are predicted."""
    best_balance: tuple[int, ...]
    even_balance: tuple[int, ...]
    best: int
    even: int
    measured: bool

    @property
    def higher(self) -> float:
        """How much fuller the even split's fullest device is: even / best - 1."""
        return self.even / self.best - 1

    @property
    def lower(self) -> float:
        """By how much mCAP's split lowers the fullest device: 1 - best / even."""
        return 1 - self.best / self.even

    def sentence(self) -> str:
        """The headline, e.g. "mCAP's split 3-3-5-19 lowers the fullest device by 35%
        against an even split (8-8-7-7), measured: 9.1 MiB instead of 14.0 MiB."."""
        how = "measured" if self.measured else "predicted"
        best, even = balance_str(self.best_balance), balance_str(self.even_balance)
        if self.best_balance == self.even_balance:
            return (f"mCAP's split is the even split here ({best}): the fullest device holds "
                    f"{fmt_bytes(self.best)}, {how}.")
        pct = abs(100 * self.lower)
        shown = f"{pct:.0f}%" if pct >= 1 else f"{pct:.2g}%"
        verb = "lowers" if self.best < self.even else "raises" if self.best > self.even else "keeps"
        amount = f" by {shown}" if self.best != self.even else ""
        return (f"mCAP's split {best} {verb} the fullest device{amount} against an even split "
                f"({even}), {how}: {fmt_bytes(self.best)} instead of {fmt_bytes(self.even)}.")


def split_gain(best, even, runs=()) -> SplitGain:
    """:class:`SplitGain` of two Recommendations (exact's and uniform's): from the measured
    peaks when ``runs`` hold an ok run of both partitionings, else from the predicted ones."""
    found = {}
    for r in runs:
        if r.status == "ok" and r.peaks:
            found[tuple(r.balance)] = r.peak
    b, e = tuple(best.balance), tuple(even.balance)
    if b in found and e in found:
        return SplitGain(b, e, found[b], found[e], True)
    return SplitGain(b, e, best.predicted_peak, even.predicted_peak, False)


def split_bars(named: tuple[tuple[str, Prediction], ...]) -> pd.DataFrame:
    """Long table (label, balance, device, predicted) of several partitionings' per-device peaks."""
    rows = [(label, balance_str(p.balance), d, peak)
            for label, p in named for d, peak in enumerate(p.peaks)]
    return pd.DataFrame(rows, columns=["label", "balance", "device", "predicted"])


def draw_split_bars(frame: pd.DataFrame, dataset: str = "") -> go.Figure:
    unit = unit_for(frame["predicted"])
    fig = go.Figure()
    for label, rows in frame.groupby("label", sort=False):
        # the plain name in the legend, the method's name in the tooltip (issue 40 item 12)
        fig.add_bar(x=[f"device {d}" for d in rows["device"]], y=scaled(rows["predicted"], unit),
                    name=f"{method_label(label)} {rows['balance'].iloc[0]}",
                    marker_color=method_color(label, None),
                    hovertemplate=f"{label} {rows['balance'].iloc[0]}<br>%{{x}}: %{{y:.2f}} "
                                  f"{unit[0]}<extra></extra>")
    fig.update_layout(barmode="group", yaxis_title=f"predicted peak ({unit[0]})")
    return finish(fig, "Predicted per-device peaks: "
                  + " vs ".join(method_label(x) for x in frame["label"].unique()), dataset)
