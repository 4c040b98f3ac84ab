"""A dataset's story for teammates in four figures (issue 14 item 10): what mCAP's split
does to the per-device peaks, how close its predictions are to measurements (paper 4.2,
Fig. 9), and how its pick compares with the baselines (paper 4.3). ``story`` is the data,
``draw_story`` the figures, ``report_html`` one self-contained HTML file (plotly.js inline,
no internet needed), which is also the "download all figures" of a dataset."""
from __future__ import annotations

import html
from dataclasses import dataclass
from datetime import date
from typing import Optional

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from mcap.core.accuracy import Accuracy, accuracy
from mcap.core.errors import McapError
from mcap.core.evaluate import percentile, pure_picks
from mcap.core.machine import describe
from mcap.core.recommend import costs_of, recommend
from mcap.core.setup import mismatch
from mcap.core.types import Prediction, Profile, Recommendation, Sweep
from mcap.core.units import fmt_bytes
from mcap.figures import overview, space
from mcap.figures._style import balance_str, finish, method_color, method_label, scaled, unit_for



def compared() -> tuple[str, ...]:
    """mCAP's pick (the default method) and every baseline a page may run while it renders
    (paper 4.3; issue 41: today's splits of DeepSpeed, torchtitan and Megatron-LM), in the
    registry's order: the first baseline is uniform, the even split the first figure shows."""
    from mcap.core import search
    return (search.DEFAULT, *search.names(uses_costs=False, needs_model=False))


@dataclass(frozen=True)
class Story:
    spec: str
    stages: int
    picks: tuple[Recommendation, ...]          # compared(), in order, less the refused
    measured: tuple[Optional[int], ...]        # each pick's measured peak in the sweep, if any
    ranks: tuple[Optional[int], ...]           # its rank among the sweep's ok runs (1 = lowest)
    pairs: pd.DataFrame                        # balance, predicted, measured per ok sweep run
    errors: space.ErrorStats
    p50: Optional[float]                       # median |relative error|
    worst: Optional[float]                     # largest |relative error|
    setup: tuple[tuple[str, str], ...] = ()    # what was measured where (setup_rows)
    accuracy: Optional[Accuracy] = None        # the dataset's error, its warning and term
    runs: tuple = ()                           # the sweep's ok runs of the profile's setup
    refused: tuple[tuple[str, str], ...] = ()  # (baseline, why) whose rule does not apply here

    def headline(self) -> str:
        """The sentence a room reads first (issue 40, item 11): what mCAP's split does to
        the fullest device against an even split, measured where the sweep has both, the
        Overview's computation (``mcap.figures.overview.split_gain``)."""
        return overview.split_gain(self.picks[0], self.picks[1], self.runs).sentence()

    @property
    def title(self) -> str:
        """The report's title: the model, the partitioning question and the device kind."""
        kind = next((v.split()[0] for k, v in self.setup if k == "device"), "")
        return (f"mcap: partitioning {self.spec} over {self.stages} pipeline stages"
                + (f" on {kind}" if kind else ""))

    def numbers(self) -> list[tuple[str, str]]:
        """The numbers that matter, as (what, value) lines for the page and the report."""
        best, rows = self.picks[0], []
        rows.append(("mCAP's partitioning", balance_str(best.balance)))
        for rec, meas, rank in zip(self.picks, self.measured, self.ranks):
            text = f"predicted {fmt_bytes(rec.predicted_peak)}"
            if meas is not None:
                text += f", measured {fmt_bytes(meas)} (rank {rank} of {len(self.pairs)})"
            else:
                text += ", not in this sample"
            rows.append((f"{method_label(rec.method)} {balance_str(rec.balance)}", text))
        rows += [(method_label(method), why) for method, why in self.refused]
        if self.accuracy is not None and self.accuracy.warning():
            rows.append(("warning", self.accuracy.warning()))
            if self.accuracy.term_sentence():
                rows.append(("where the error comes from", self.accuracy.term_sentence()))
        if self.errors.count:
            rows += [("partitionings compared", f"{self.errors.count}"),
                     ("median |error|", f"{100 * self.p50:.1f}%"),
                     ("90% within", f"±{100 * self.errors.p90:.1f}%"),
                     ("worst |error|", f"{100 * self.worst:.1f}%"),
                     ("within the paper's ±14%", f"{100 * self.errors.within_paper:.0f}%")]
        return rows


def setup_rows(profile: Profile, sweep: Optional[Sweep], predictor: str,
               names: tuple[str, str] = ("", ""), today: Optional[date] = None
               ) -> tuple[tuple[str, str], ...]:
    """What the numbers are of (the report's setup block): device and machine, model,
    batch, micro-batches, schedule, checkpointing, predictor, the datasets and the date."""
    s = profile.setup
    rows = [("device", f"{s.device.upper() if s.device == 'cuda' else 'CPU'} "
                       f"({s.stages} stage processes, engine {s.engine})"),
            ("machine", describe(profile.machine)),
            ("model", f"{profile.model.spec} ({profile.model.num_layers} layers)"),
            ("batch", f"{s.batch_size} samples in {s.chunks} micro-batch"
                      f"{'es' if s.chunks != 1 else ''}"),
            ("schedule", s.schedule),
            ("checkpointing", s.checkpoint),
            ("optimizer", s.optimizer),
            ("predictor", predictor),
            ("profile", f"{names[0] or 'profile'}: {len(profile.runs)} profiling runs")]
    if sweep is not None:
        rows.append(("sweep", f"{names[1] or 'sweep'}: {len(sweep.runs)} measured partitionings"
                              + ("" if sweep.machine == profile.machine else
                                 f" on {describe(sweep.machine)}")))
    rows.append(("date", (today or date.today()).isoformat()))
    return tuple(rows)


def story(profile: Profile, sweep: Optional[Sweep], predictor: Optional[str] = None,
          names: tuple[str, str] = ("", ""), today: Optional[date] = None) -> Story:
    """Everything the four figures and the numbers show, from the library's own entries."""
    g = profile.setup.stages
    refused: list = []
    picks = pure_picks(profile, g, predictor=predictor, methods=compared(), refused=refused)
    runs = () if sweep is None or mismatch(profile, sweep) else tuple(
        r for r in sweep.runs if r.status == "ok" and r.peaks and len(r.balance) == g)
    costs = costs_of(profile, predictor)
    try:
        acc = accuracy(profile, sweep, predictor) if runs else None
    except McapError:
        acc = None
    predicted = costs.peaks_many(np.asarray([r.balance for r in runs], dtype=np.int64)) if runs else []
    preds = tuple(Prediction(tuple(r.balance), tuple(int(x) for x in row))
                  for r, row in zip(runs, predicted))
    pairs = pd.DataFrame([(balance_str(r.balance), p.peak, r.peak) for r, p in zip(runs, preds)],
                         columns=["balance", "predicted", "measured"])
    by_balance = {tuple(r.balance): r.peak for r in runs}
    ranked = sorted(by_balance.values())
    measured = tuple(by_balance.get(tuple(p.balance)) for p in picks)
    ranks = tuple(None if m is None else 1 + sum(1 for x in ranked if x < m) for m in measured)
    errors = space.error_stats(runs, preds)
    absolute = [abs(e) for e in errors.errors]
    return Story(profile.model.spec, g, picks, measured, ranks, pairs, errors,
                 percentile(absolute, 50) if absolute else None, max(absolute, default=None),
                 setup_rows(profile, sweep if runs else None, costs.predictor, names, today), acc,
                 runs, tuple(refused))


def draw_predicted_vs_measured(s: Story, dataset: str = "") -> go.Figure:
    unit = unit_for([*s.pairs["predicted"], *s.pairs["measured"]])
    x, y = scaled(s.pairs["measured"], unit), scaled(s.pairs["predicted"], unit)
    fig = go.Figure()
    fig.add_scatter(x=x, y=y, mode="markers", name="partitionings", customdata=s.pairs["balance"],
                    marker=dict(size=6, opacity=0.5, color="#1f77b4"),
                    hovertemplate="%{customdata}<br>measured %{x:.1f}, predicted %{y:.1f} "
                                  + unit[0] + "<extra></extra>")
    if x:
        lo, hi = min(x + y), max(x + y)
        fig.add_scatter(x=[lo, hi], y=[lo, hi], mode="lines", name="predicted = measured",
                        line=dict(color="black", dash="dash"))
    fig.update_layout(xaxis_title=f"measured peak of the fullest device ({unit[0]})",
                      yaxis_title=f"predicted ({unit[0]})")
    return finish(fig, "Predicted vs measured peak, every measured partitioning", dataset)


def draw_picks(s: Story, dataset: str = "") -> go.Figure:
    """The fullest device's peak of mCAP's pick and the baselines: predicted bars, measured
    diamonds where the sweep measured the pick."""
    unit = unit_for([*(p.predicted_peak for p in s.picks), *s.measured])
    names = [f"{method_label(p.method)}<br>{balance_str(p.balance)}" for p in s.picks]
    fig = go.Figure()
    # whiskers: the sweep's p90 error, so a predicted bar says how far to trust it
    p90 = s.errors.p90 if s.errors.count else None
    # At a p90 of 0.1% a whisker is shorter than its line is thick (issue 40, item 10): wide
    # caps mark where it is, and each bar says its ± above it.
    fig.add_bar(x=names, y=scaled([p.predicted_peak for p in s.picks], unit),
                name="predicted" if p90 is None else f"predicted (± p90 error {100 * p90:.2g}%)",
                error_y=None if p90 is None else dict(type="percent", value=100 * p90,
                                                      color="black", thickness=2, width=18),
                text=None if p90 is None else [f"±{100 * p90:.2g}%"] * len(s.picks),
                textposition="outside", cliponaxis=False, customdata=[p.method for p in s.picks],
                hovertemplate="%{customdata}: predicted %{y:.2f} " + unit[0] + "<extra></extra>",
                marker_color=[method_color(p.method, "#888") for p in s.picks])
    fig.add_scatter(x=names, y=scaled(s.measured, unit), mode="markers", name="measured",
                    marker=dict(symbol="diamond", size=14, color="black"))
    fig.update_layout(yaxis_title=f"peak of the fullest device ({unit[0]})")
    return finish(fig, "mCAP's pick vs the baselines: peak of the fullest device", dataset)


def draw_story(s: Story, dataset: str = "") -> tuple[go.Figure, ...]:
    """The four figures, in the order the story is told."""
    even, mcap = s.picks[1], s.picks[0]  # compared(): mCAP's pick, then uniform
    split = overview.split_bars(((even.method, _prediction(even)), (mcap.method, _prediction(mcap))))
    figs = [overview.draw_split_bars(split, dataset), draw_picks(s, dataset)]
    if s.errors.count:
        figs += [draw_predicted_vs_measured(s, dataset), space.draw_errors(s.errors, dataset)]
    return tuple(figs)


def _prediction(rec: Recommendation) -> Prediction:
    return Prediction(tuple(rec.balance), tuple(rec.predicted_peaks))


def report_html(s: Story, figures: tuple[go.Figure, ...], title: Optional[str] = None) -> str:
    """One self-contained HTML page: the setup the numbers are of, the numbers and the
    figures, plotly.js inlined once."""
    title = title or s.title
    setup = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                    for k, v in s.setup)
    rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td></tr>"
                   for k, v in s.numbers())
    parts = [fig.to_html(full_html=False, include_plotlyjs=(i == 0),
                         config={"displaylogo": False}, default_width="100%", default_height="520px")
             for i, fig in enumerate(figures)]
    return ("<!DOCTYPE html><html><head><meta charset='utf-8'><title>" + html.escape(title)
            + "</title><style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
              "td,th{padding:2px 12px;text-align:left;vertical-align:top}"
              "th{font-weight:normal;color:#555}</style></head><body><h1>" + html.escape(title)
            + "</h1><p class='headline'><b>" + html.escape(s.headline()) + "</b></p>"
            + "<h2>Setup</h2><table class='setup'>" + setup + "</table>"
            + "<h2>Numbers</h2><table class='numbers'>" + rows + "</table>" + "".join(parts)
            + "</body></html>")
