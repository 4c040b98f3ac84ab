"""Overview: what mCAP does, the dataset to look at, its model, setup and headline numbers."""
import streamlit as st

from mcap.core.errors import McapError
from mcap.figures import overview as fig_over
from mcap.figures._style import balance_str, fmt_bytes
from pages._accuracy import show_accuracy
from mcap.app.ranks import is_multi
from pages._ranks import overview_note
from pages._search import prediction_of, recommendations
from pages._shared import (
    add_upload, chart, choices, choose_profile, chosen_param, current, dataset_label,
    dataset_name, error, json_download, remember, restore_url, shared, sweep_for)

restore_url()
st.title("mcap: memory-centric partitioning")
st.markdown(
    "Pipeline-parallel training splits a model's layers over devices. Splits balanced for "
    "*throughput* leave one device far fuller than the others, so the largest model that fits "
    "is smaller than it could be. **mCAP** (Dreuning et al.) balances **peak memory** instead: "
    "it measures a few short profiling runs, derives two statistics per layer "
    "(`mem_isolated`, `mem_added`), predicts every partitioning's per-device peak from them, "
    "and recommends the partitioning whose fullest device is the least full.")

st.subheader("Dataset")
# The pickers are drawn after the upload is read, so they show what was just uploaded.
pickers = st.container()
upload = st.file_uploader("…or upload a profile or a sweep (a JSON file mcap wrote)",
                          type=["json"], key="upload")
# A file stays in the uploader across reruns: read it once, so a later pick in the pickers
# is not undone by the same file on the next rerun.
if upload is not None and st.session_state.get("upload-read") != upload.file_id:
    st.session_state["upload-read"] = upload.file_id
    try:
        kind, param = add_upload(upload.name, upload.getvalue())
        st.session_state[f"choose-{kind}"] = param  # the picker follows the upload
        if kind == "profile":  # an uploaded profile brings its sweep too (issue 40 item 1)
            brought = choose_profile(param)
            if brought is not None:
                st.session_state["choose-sweep"] = brought
        else:
            remember(kind, param)
        st.session_state["upload-note"] = (kind, upload.name, param)
    except McapError as exc:
        st.session_state.pop("upload-note", None)
        error(exc, f"Cannot use {upload.name}: ")
note = st.session_state.get("upload-note")
if upload is not None and note is not None and note[1] == upload.name:
    st.success(f"Loaded {note[1]} as a {note[0]}. A link to this page opens it on this server "
               f"as long as it runs.")
left, right = pickers.columns(2)
for kind, col, what in (("profile", left, "Profile (layer statistics)"),
                        ("sweep", right, "Sweep (measured partition space)")):
    chosen = chosen_param(kind)  # a link's dataset that cannot be used is said here, once
    refs = choices(kind)
    if not refs:
        col.warning(f"No {kind} available yet: data/ and the store have none.")
        continue
    params = [r.param for r in refs]
    if st.session_state.get(f"choose-{kind}") not in params:
        st.session_state.pop(f"choose-{kind}", None)
    # set by an upload (above) or a previous run: the widget's own state, no second default
    start = {} if f"choose-{kind}" in st.session_state else {
        "index": params.index(chosen) if chosen in params else 0}
    pick = col.selectbox(what, params, format_func={r.param: str(r) for r in refs}.get,
                         key=f"choose-{kind}", **start)
    if kind == "profile" and pick != chosen:
        # Choosing a profile chooses the sweep of its model, setup and machine (issue 40,
        # item 1); without one the chosen sweep stays, and the pages say once why their
        # measured peaks are left out.
        brought = choose_profile(pick)
        if brought is not None:
            st.session_state["choose-sweep"] = brought
            st.session_state["sweep-note"] = (pick, brought)
    else:
        remember(kind, pick)
brought = st.session_state.get("sweep-note")
if brought is not None and brought == (shared("profile"), shared("sweep")):
    pickers.caption(f"The sweep follows the profile: {dataset_label(brought[1])} was measured on "
                    f"the same model, setup and machine as {dataset_label(brought[0])}.")

profile = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))

h = fig_over.headline(profile)
st.subheader(f"Model `{h.spec}`")
# Three a row: five in a row cut "27 ok of 27" and "135.31 MiB" at 1280 px (issue 40, 13)
c = st.columns(3) + st.columns(3)
c[0].metric("layers", h.layers)
c[1].metric("parameters", fmt_bytes(h.param_bytes))
c[2].metric("stages", h.stages)
c[3].metric("batch / micro-batches", f"{h.batch_size} / {h.chunks}")
c[4].metric("profiling runs", f"{h.ok} ok of {h.runs}")
st.caption(f"Setup: schedule {h.schedule}, checkpoint {h.checkpoint}, {h.device} stages via "
           f"{h.engine}; capacity {fmt_bytes(h.capacity_bytes) if h.capacity_bytes else 'none'}.")

if is_multi(profile.setup):  # several chunks per device: rank by rank, on Predict and Recommend
    overview_note(profile)
    st.stop()
try:
    best, even = recommendations(profile, h.stages, ("exact", "uniform"))
except McapError as exc:
    error(exc)
    st.stop()
c = st.columns(3)
c[0].metric("mCAP's partitioning", balance_str(best.balance))
c[1].metric("its predicted peak", fmt_bytes(best.predicted_peak))
gain = fig_over.split_gain(best, even)  # Present's headline is the same computation
c[2].metric("vs. an even split", fmt_bytes(even.predicted_peak),
            delta=f"{100 * gain.higher:+.1f}%", delta_color="inverse")
show_accuracy(profile, sweep)
bars = fig_over.split_bars((("uniform", prediction_of(even)), ("exact", prediction_of(best))))
st.markdown("**One picture:** the per-device peaks mCAP predicts for an even split of the layers "
            "and for its own memory-balanced split. The fullest device decides what fits.")
chart(fig_over.draw_split_bars(bars, dataset_name("profile")), key="overview-chart", name="overview")

if sweep is not None:
    hs = fig_over.headline(sweep)
    st.subheader("Sweep")
    c = st.columns(4)
    c[0].metric("measured partitionings", hs.runs)
    c[1].metric("ok / oom / failed", f"{hs.ok} / {hs.oom} / {hs.failed}")
    c[2].metric("lowest measured peak", fmt_bytes(hs.lowest_peak))
    c[3].metric("at", balance_str(hs.lowest_balance) if hs.lowest_balance else "-")

json_download({"profile": fig_over.headline(profile).__dict__,
               "sweep": None if sweep is None else fig_over.headline(sweep).__dict__,
               "recommended": list(best.balance), "predicted_peak": best.predicted_peak},
              "mcap-overview", key="overview-json")
