"""Predict vs measure: per-device predicted peaks (paper 3.3) as bars, measured peaks as
markers where the store has them, a capacity line, and a button that measures it."""
from dataclasses import replace

import streamlit as st

from mcap.app import jobs
from mcap.app.devices import measure_devices
from mcap.core.accuracy import stage_measurements, stage_terms, terms_sentence
from mcap.core.errors import McapError
from mcap.figures import devices as fig_dev
from mcap.figures._style import MISSING, balance_str, fmt_bytes, table_view
from mcap.core.partition import parse_balance, validate
from mcap.core.recommend import costs_of
from mcap.core.search import DEFAULT
from mcap.core.types import Prediction
from mcap.runner.engines import get as get_engine
from mcap.app.ranks import is_multi
from pages._accuracy import show_accuracy
from pages._ranks import predict_page
from pages._jobs import gpu_count, job_panel, measure_args
from pages._search import (
    done_elsewhere, measured_for, measured_runs, method_label, methods, predictor_choice,
    recommendation,
    slow, stage_peaks, uniform_balance,
)
from pages._shared import (
    caption_of, chart, current, dataset_name, downloads, error, remember, restore_url, shared,
    shared_choice, shared_float, shared_int, store, sweep_for)


restore_url()
st.title("Predict vs measure")
profile = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))
st.caption(caption_of(profile))
if is_multi(profile.setup):  # several chunks per rank: the schedules' op model, rank by rank
    predict_page(profile, sweep)
    st.stop()
predictor = predictor_choice(st.sidebar, key="predict-predictor")
layers = profile.model.num_layers
setup = profile.setup

# The pick mode is kept in the session's shared state (and this page's URL), so a visit to
# another page does not reset it (issue 40, item 4); a link's value it does not know is said.
MODES = {"typed": "type it", "per-stage": "per stage", "recommended": "from a recommendation"}
code = shared_choice("pick", tuple(MODES), "typed")
mode = st.radio("Pick a partitioning", tuple(MODES.values()), horizontal=True, key="pick-mode",
                index=list(MODES).index(code))
remember("pick", next(k for k, v in MODES.items() if v == mode))
balance_text = shared("balance") or ",".join(map(str, uniform_balance(layers, setup.stages)))
try:
    if mode == "type it":
        text = st.text_input("Layers per device", value=balance_text, key="pick-text",
                             help=f"comma-separated layer counts summing to {layers}, e.g. 3,3,5,19")
        balance = validate(parse_balance(text), layers).balance
    elif mode == "per stage":
        stages = st.number_input("Stages", 1, layers, value=shared_int("stages", setup.stages, 1, layers),
                                 key="pick-stages")
        remember("stages", stages)
        try:
            start = parse_balance(balance_text)
        except McapError:
            start = ()
        if len(start) != stages:
            start = uniform_balance(layers, int(stages))
        cols = st.columns(int(stages))
        balance = tuple(int(col.number_input(f"stage {i}", 1, layers, value=int(start[i]),
                                             key=f"pick-stage-{i}-of-{stages}"))
                        for i, col in enumerate(cols))
        validate(balance, layers)
    else:
        names = list(methods())
        method = shared_choice("method", names, DEFAULT)
        left, right = st.columns(2)
        method = left.selectbox("Method", names, index=names.index(method),
                                key="pick-method", format_func=method_label)
        stages = right.number_input("Stages", 1, layers, value=shared_int("stages", setup.stages, 1, layers),
                                    key="pick-rec-stages")
        remember("method", method)
        remember("stages", stages)
        if slow(method):  # minutes of search, or timing the real model: once done elsewhere
            done, why = done_elsewhere(profile, int(stages), method)
            if done is None:
                st.info(f"{why} Or pick another method.")
                st.stop()
            balance = done.balance
        else:
            with st.spinner(f"{method_label(method)} is searching…"):
                balance = recommendation(profile, int(stages), method).balance
        st.write(f"{method_label(method)} recommends **{balance_str(balance)}**.")
except McapError as exc:
    error(exc)
    st.stop()
remember("balance", ",".join(map(str, balance)))

cap_default = setup.capacity_bytes / 2**20 if setup.capacity_bytes else 0.0
capacity_mib = st.number_input("Capacity per device (MiB, 0 for none)", min_value=0.0,
                               value=shared_float("capacity", float(cap_default), 0.0, 10.0**9),
                               step=64.0, key="pick-capacity")
remember("capacity", capacity_mib if capacity_mib > 0 else None)
capacity = int(capacity_mib * 2**20) if capacity_mib > 0 else None

prediction = Prediction(balance, stage_peaks(profile, balance))
runs = measured_runs(profile, sweep)
run = measured_for(runs, balance) if len(balance) == setup.stages else None
data = fig_dev.device_bars(prediction, run, capacity)

c = st.columns(4)
c[0].metric("partitioning", balance_str(balance))
c[1].metric("predicted peak", fmt_bytes(prediction.peak))
if data.measured is not None:
    c[2].metric("measured peak", fmt_bytes(max(data.measured)),
                delta=f"{100 * (prediction.peak - max(data.measured)) / max(data.measured):+.1f}% predicted",
                delta_color="off")
else:
    # "–" with a tooltip: "not measured" was cut to "not measur…" at 1280 px (issue 40 item 13)
    c[2].metric("measured peak", run.status if run is not None else MISSING,
                help=None if run is not None else "not measured: this partitioning is in no "
                     "measured sweep or store run of this model and setup")
c[3].metric("over capacity", ", ".join(f"device {d}" for d in data.over_capacity) or "none")
show_accuracy(profile, sweep)
if len(balance) == setup.stages:
    st.caption(terms_sentence(prediction.peaks, stage_measurements(runs, balance, setup.schedule),
                              stage_terms(profile, costs_of(profile, predictor), balance)))
if data.over_capacity:
    st.error(f"Capacity {fmt_bytes(capacity)} is too small: predicted peaks "
             + ", ".join(f"device {d} {fmt_bytes(prediction.peaks[d])}" for d in data.over_capacity)
             + " exceed it.")
chart(fig_dev.draw_device_bars(data, dataset=dataset_name("profile")), key="predict-chart", name=f"devices-{balance_str(balance)}")
table = fig_dev.device_table(data)
st.dataframe(table_view(table, ("predicted", "measured")), hide_index=True, key="predict-table")
downloads(table, f"mcap-devices-{balance_str(balance)}", "predict")

st.subheader("Measure this partitioning")
if len(balance) != setup.stages:
    st.info(f"Measuring needs {setup.stages} stages (the profile's setup); this partitioning has {len(balance)}.")
else:
    s = store()
    options, why = measure_devices(setup.device, gpu_count())
    if why:
        st.info(why)
    device = st.selectbox("Device", options, key="measure-device",
                          help="where the stage processes run; the dataset's own device first")
    if s is not None and st.button(f"▶️ Measure {balance_str(balance)} on {device}", key="measure-button"):
        try:
            get_engine(setup.engine).check(replace(setup, device=device), gpu_count())
            job = jobs.launch(s, "measure", measure_args(profile, balance, device), total=1)
            st.session_state["measure-job"] = job.id
        except McapError as exc:
            error(exc)
    if s is not None and st.session_state.get("measure-job"):
        job_panel(s, st.session_state["measure-job"], key="measure")
