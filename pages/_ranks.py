"""Predict and Recommend for a profile of a multi-chunk schedule, rank by rank (issue 39,
item 1: the pages): a thin layer over :mod:`mcap.app.ranks`, cached per dataset content."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from mcap.app import ranks
from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.partition import parse_balance
from mcap.figures import devices as fig_dev
from mcap.figures import rankspace as fig_rank
from mcap.figures._style import MISSING, balance_str, fmt_bytes, table_view
from mcap.io import datasets
from pages._datasets import open_dataset, profile_param, revision_of
from pages._shared import (
    chart, dataset_name, downloads, error, remember, shared, shared_choice, shared_float)


def _key():
    """The cache key of the page's profile (None for one that is not a dataset ref)."""
    param = profile_param()
    return (param, revision_of(datasets.parse_ref(param))) if param else None


@st.cache_resource(show_spinner=False, max_entries=8)
def _model(param: str, revision: tuple):
    return ranks.model_of(open_dataset(param))


@st.cache_resource(show_spinner=False, max_entries=8)
def _targets(param: str, revision: tuple):
    profile = open_dataset(param)
    return ranks.targets(profile, _model(param, revision))


@st.cache_resource(show_spinner=False, max_entries=32)
def _pick(param: str, revision: tuple, schedule: str, virtual: int):
    profile = open_dataset(param)
    return ranks.pick(profile, _model(param, revision), ranks.Target(schedule, virtual))


def _model_and_targets(profile):
    key = _key()
    with st.spinner("reading the profile's op timelines and torch's action lists…"):
        if key is None:
            model = ranks.model_of(profile)
            return model, ranks.targets(profile, model)
        return _model(*key), _targets(*key)


def _measured_under(profile) -> str:
    s = profile.setup
    return (f"This profile was measured under **{schedules.get(s.schedule).label}** with "
            f"{s.virtual_stages} stages per device on {s.stages} devices: each device holds "
            "several chunks of layers")


def intro(profile) -> None:
    st.info(_measured_under(profile) + ", so its peak is predicted device by device from the "
            "profile's op timelines and torch's action list (the schedules' op model), not by "
            "mCAP's per-stage statistics (the docs' Schedules page says how).")


def overview_note(profile) -> None:
    st.info(_measured_under(profile) + ", whose peaks the Predict and Recommend pages read "
            "device by device (the schedules' op model). The one-stage summary of this page "
            "(mCAP's split against an even one) needs a profile measured one stage per device "
            "(GPipe or 1F1B).")


def one_stage_only(profile, what: str) -> None:
    """Stop a page that reads mCAP's per-stage statistics on a multi-chunk profile, saying
    why and where its devices are read instead."""
    if ranks.is_multi(profile.setup):
        st.info(_measured_under(profile) + f". {what} reads mCAP's per-stage statistics, which "
                "need a profile measured one stage per device (GPipe or 1F1B): pick one on "
                "Overview, or see this profile's devices on the Predict and Recommend pages.")
        st.stop()


def choose_target(profile, model_targets) -> "ranks.Target":
    model, (targets, why) = model_targets
    if not targets:
        raise McapError("this profile's op model covers no schedule on its ranks: "
                        + "; ".join(why))
    codes = [t.schedule for t in targets]  # the Explained page's shared "schedule" too
    code = shared_choice("schedule", codes, codes[0])
    code = st.selectbox("Schedule", codes, index=codes.index(code), key="rank-schedule",
                        format_func=lambda c: targets[codes.index(c)].label,
                        help="the schedules this profile's ops predict (a GPipe profile measures "
                             "F and B ops, a zero-bubble one I and W)")
    remember("schedule", code)
    if why:
        with st.expander(f"{len(why)} schedule(s) not offered, and why"):
            st.markdown("\n".join(f"- {w}" for w in why))
    return targets[codes.index(code)]


def _table(view) -> pd.DataFrame:
    measured = view.bars().measured
    return pd.DataFrame({
        "device": [f"device {r}" for r in range(len(view.predicted))],
        "chunks (layers)": list(view.chunks_text),
        "predicted": list(view.predicted),
        "measured": list(measured) if measured else [None] * len(view.predicted)})


def show(view, capacity, name: str, key: str) -> None:
    """Metrics, the device bars and the table of one rank view."""
    data = view.bars(capacity)
    c = st.columns(4)
    c[0].metric("partitioning", balance_str(view.balance))
    c[1].metric("predicted peak", fmt_bytes(max(view.predicted)))
    if data.measured is not None:
        m = max(data.measured)
        c[2].metric("measured peak", fmt_bytes(m),
                    delta=f"{100 * (max(view.predicted) - m) / m:+.1f}% predicted",
                    delta_color="off")
    else:
        c[2].metric("measured peak", view.run.status if view.run is not None else MISSING,
                    help=None if view.run is not None else "not measured: no sweep of this "
                    "model, setup and schedule measured this partitioning")
    c[3].metric("over capacity", ", ".join(f"device {d}" for d in data.over_capacity) or "none")
    if data.over_capacity:
        st.error(f"Capacity {fmt_bytes(capacity)} is too small: predicted peaks "
                 + ", ".join(f"device {d} {fmt_bytes(view.predicted[d])}"
                             for d in data.over_capacity) + " exceed it.")
    chart(fig_dev.draw_device_bars(data, dataset=dataset_name("profile")), key=f"{key}-chart",
          name=name)
    table = _table(view)
    st.dataframe(table_view(table, ("predicted", "measured")), hide_index=True,
                 key=f"{key}-table")
    downloads(table, name, key)


def predict_page(profile, sweep) -> None:
    """The Predict page for a multi-chunk profile: a typed partitioning of G·V chunks."""
    intro(profile)
    try:
        model_targets = _model_and_targets(profile)
        target, model = choose_target(profile, model_targets), model_targets[0]
        n = profile.setup.stages * target.virtual
        start = shared("balance") or ""
        try:
            if len(parse_balance(start)) != n:
                start = ""
        except McapError:
            start = ""
        if not start:  # an even split, or the lowest predicted one where no chunk may end
            try:        # where an even split puts an end (a view layer under zero bubble)
                start = ranks.predict(profile, model, target,
                                      ranks.default_balance(profile, target)).balance
            except McapError:
                start = _picked(profile, target)[0].balance
            start = ",".join(map(str, start))
        text = st.text_input(f"Layers per chunk ({n} chunks: {profile.setup.stages} ranks x "
                             f"{target.virtual})", value=start, key="rank-text",
                             help=f"comma-separated layer counts of the {n} chunks in pipeline "
                                  f"order, summing to {profile.model.num_layers}")
        view = ranks.predict(profile, model, target, parse_balance(text), sweep)
    except McapError as exc:
        error(exc)
        st.stop()
    remember("balance", ",".join(map(str, view.balance)))
    cap = st.number_input("Capacity per device (MiB, 0 for none)", min_value=0.0,
                          value=shared_float("capacity", 0.0, 0.0, 10.0**9), step=64.0,
                          key="rank-capacity")
    remember("capacity", cap if cap > 0 else None)
    show(view, int(cap * 2**20) if cap > 0 else None,
         f"devices-{target.schedule}-{balance_str(view.balance)}", "rank-predict")


def _picked(profile, target):
    key = _key()
    with st.spinner("searching every partitioning of the chunks…"):
        if key is None:
            return ranks.pick(profile, _model_and_targets(profile)[0], target)
        return _pick(*key, target.schedule, target.virtual)


def recommend_page(profile, sweep) -> None:
    """The Recommend page for a multi-chunk profile: the partitioning of G·V chunks with the
    lowest predicted peak under the chosen schedule."""
    intro(profile)
    try:
        model_targets = _model_and_targets(profile)
        target = choose_target(profile, model_targets)
        view, exhaustive = _picked(profile, target)
        # the measured run is the chosen sweep's, looked up after the cached search
        view = ranks.predict(profile, model_targets[0], target, view.balance, sweep)
    except McapError as exc:
        error(exc)
        st.stop()
    how = "every partitioning" if exhaustive else "a local search from several starts " \
        "(not exhaustive: there are too many partitionings to try them all)"
    st.write(f"The lowest predicted peak under {target.label}: **{balance_str(view.balance)}** "
             f"at {fmt_bytes(max(view.predicted))} (searched {how}).")
    show(view, None, f"recommend-{target.schedule}-{balance_str(view.balance)}", "rank-rec")


@st.cache_resource(show_spinner=False, max_entries=8)
def _check(param: str, revision: tuple, sweep_param: str, sweep_revision: tuple):
    return ranks.check_sweep(open_dataset(param), _model(param, revision),
                             open_dataset(sweep_param))


def _checked(profile, sweep):
    """The sweep against the profile's op model, cached on both datasets' content."""
    key, sweep_param = _key(), shared("sweep")
    with st.spinner("predicting every measured partitioning device by device and searching "
                    "every partitioning of the chunks…"):
        if key is None or not sweep_param:
            return ranks.check_sweep(profile, ranks.model_of(profile), sweep)
        return _check(*key, sweep_param, revision_of(datasets.parse_ref(sweep_param)))


def space_page(profile, sweep) -> None:
    """Partition space for a multi-chunk profile or sweep: the sweep's measured
    partitionings against the op model's predictions, device by device, and the op model's
    pick; an st.error naming the values where the profile's ops cannot predict the sweep."""
    s = sweep.setup
    said = _measured_under(profile) if ranks.is_multi(profile.setup) else (
        f"The sweep was measured under **{schedules.get(s.schedule).label}** with "
        f"{s.virtual_stages} stages per device on {s.stages} devices")
    st.info(said + ", so this page predicts the sweep's partitionings device by device from the profile's op timelines and torch's action list (the "
            "schedules' op model), as `python -m mcap evaluate` does, not by mCAP's per-stage "
            "statistics.")
    try:
        check = _checked(profile, sweep)
    except McapError as exc:
        error(exc, f"The sweep {dataset_name('sweep')} cannot be predicted from the profile "
                   f"{dataset_name('profile')}: ")
        st.stop()
    ev, name = check.evaluation, dataset_name("sweep")
    st.markdown(f"**{ev.partitionings} measured partitionings** under {check.target.label} "
                f"on {sweep.setup.stages} devices.")
    c = st.columns(4)
    for col, (label, value) in zip(c, ranks.pick_metrics(check).items()):
        col.metric(label, value)
    how = "every partitioning" if ev.exhaustive else "a local search (not exhaustive)"
    st.caption(f"The op model's pick is the Recommend page's: the lowest predicted peak over "
               f"{how}. Rank: among the sweep's ok partitionings by measured peak, 1 = lowest "
               f"(the sweep's lowest is {balance_str(ev.best)} at {fmt_bytes(ev.best_peak)}).")
    points = fig_rank.rank_points(check.measured, ev.pick)
    chart(fig_rank.draw_rank_space(points, ev.pick, ev.pick_predicted, dataset=name),
          key="rank-space-chart", name="partition-space-devices")
    downloads(points.drop(columns=["devices"]), "mcap-partition-space-devices", "rank-space")

    st.subheader("Prediction error, device by device")
    c = st.columns(5)
    for col, (label, value) in zip(c, ranks.space_metrics(check).items()):
        col.metric(label, value)
    errors = fig_rank.device_errors(check.measured)
    chart(fig_rank.draw_device_errors(errors, ev.median, ev.p90, dataset=name),
          key="rank-space-errors", name="prediction-error-devices")
    st.caption("Relative error = (predicted − measured) / measured peak of each device of "
               "every measured partitioning; the metrics are of its absolute value.")
    if ev.unpredicted:
        st.caption(f"Not predicted ({len(ev.unpredicted)}): the profile gives no reading of a "
                   "chunk of " + ", ".join(balance_str(b) for b in ev.unpredicted[:5])
                   + (" …" if len(ev.unpredicted) > 5 else "") + ".")
    downloads(errors, "mcap-prediction-error-devices", "rank-space-errors")
