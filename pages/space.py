"""Partition space: every measured partitioning of a sweep, peak memory vs throughput,
its Pareto front, the recommendations highlighted (paper 4.2, Fig. 10), the per-device
bars of a selected point, and the prediction-error histogram (Fig. 9)."""
import streamlit as st

from mcap.app.forcuda import bundled_checks, sentence as for_cuda_sentence
from mcap.app.wording import plain
from mcap.core import throughput
from mcap.core.errors import McapError
from mcap.io import agreement
from mcap.io.datasets import datasets_dir
from mcap.figures import devices as fig_dev
from mcap.figures import overview as fig_over
from mcap.figures import space as fig_space
from mcap.figures._style import balance_str, fmt_bytes, table_view
from mcap.core.types import Prediction
from mcap.io.datasets import parse_ref
from pages._search import (
    current_predictor, done_elsewhere, measured_for, method_label, methods, partial,
    predictor_choice, recommendation,
    slow, stage_peaks, sweep_predictions,
)
from mcap.app.ranks import is_multi
from pages._ranks import space_page
from pages._shared import (
    caption_of, chart, current, dataset_name, downloads, error, profile_for, profile_param,
    remember, restore_url, revision_of, shared, shared_balance, shared_choice)



@st.cache_resource(show_spinner=False, max_entries=8)
def _points(key: tuple, marks: tuple, all_composed: bool, _runs, _estimate):
    return fig_space.space_points(_runs, marks, _estimate,
                                  composed="all" if all_composed else "marks")


@st.cache_resource(show_spinner=False, max_entries=32)
def _scatter(key: tuple, marks: tuple, all_composed: bool, selected, name: str, _points):
    return fig_space.draw_space(_points, selected, dataset=name)


@st.cache_resource(show_spinner=False, max_entries=8)
def _errors_figure(key: tuple, name: str, _errors):
    return fig_space.draw_errors(_errors, dataset=name)


@st.cache_data(show_spinner=False)
def _for_cuda(folder: str):
    """The bundled CPU profiles planned for the bundled GPU sweeps (mcap.app.forcuda)."""
    from pathlib import Path
    return bundled_checks(Path(folder))


restore_url()
st.title("Partition space")
sweep = current("sweep")
chosen = current("profile")
if is_multi(chosen.setup) or is_multi(sweep.setup):  # several chunks per device: op model
    st.caption(caption_of(sweep))
    space_page(chosen, sweep)
    st.stop()
profile = profile_for(sweep, chosen)
st.caption(caption_of(sweep))
name = dataset_name("sweep")
BYTES = ("predicted_peak", "measured_peak", "predicted", "measured")
predictor_choice(st.sidebar, key="space-predictor")

try:
    predictions = sweep_predictions(profile, sweep)
except McapError as exc:
    error(exc)
    st.stop()

stages = sweep.setup.stages
with st.expander("Highlighted methods", expanded=False):
    chosen = st.multiselect("Show the picks of", methods(), default=list(methods()),
                            key="space-marks", format_func=method_label,
                            help="the picks of "
                                 + ", ".join(method_label(m) for m in methods() if slow(m))
                                 + " appear once they have run on the Recommend page")
marks, recs = [], []
for method in chosen:
    if slow(method):  # minutes of search, or timing the real model: shown once done elsewhere
        rec, why = done_elsewhere(profile, stages, method)
        if rec is None:
            st.caption(why)
        else:
            recs.append(rec)
            marks.append(fig_space.Mark(method, tuple(rec.balance)))
        continue
    try:
        rec = recommendation(profile, stages, method)
    except McapError as exc:
        if partial(method):  # a split whose rule does not exist here (issue 41): said, no error
            st.caption(f"{method}: {exc}")
        else:
            error(exc, f"{method}: ")
        continue
    recs.append(rec)
    marks.append(fig_space.Mark(method, tuple(rec.balance)))
marks = tuple(marks)

estimate = throughput.from_json((sweep.extra or {}).get("throughput_estimate"))
# The picks and the lowest peak are drawn with an estimated throughput whatever the box
# says (without it a composed pick had no star and the lowest point was not the sweep's
# lowest peak); every other composed partitioning only when asked (thousands of points).
show_estimates = estimate is not None and st.sidebar.checkbox(
    "Estimated throughput for every composed partitioning", key="space-estimates",
    value=shared_choice("estimates", ("0", "1"), "0") == "1",  # another value is said once
    help="Stage reuse composes peaks exactly but never times a composed partitioning; its "
         "throughput is then estimated from per-layer times. The "
         "picks and the lowest peak are drawn so in any case.")
if estimate is not None:
    remember("estimates", "1" if show_estimates else "0")
# The points, the scatter and the error histogram of a sweep are built once per dataset
# content, predictor and view (st.cache_resource: plotly figures nothing changes), not on
# every click: a click redrew 3,654 points twice over (issue 40, item 3).
view_key = (profile_param(), shared("sweep"), current_predictor(),
            tuple(revision_of(parse_ref(p)) for p in (profile_param(), shared("sweep")) if p))
points = _points(view_key, marks, show_estimates, sweep.runs, estimate)
c = st.columns(4)
c[0].metric("measured partitionings", len(sweep.runs))
c[1].metric("with measured throughput", int((points["basis"] == fig_space.MEASURED).sum()),
            help="timed on a run of the partitioning with its stages together; hollow points' "
                 "throughput is estimated and not counted here")
c[2].metric("on the Pareto front", int(points["pareto"].sum()))
lowest = fig_over.headline(sweep).lowest_peak  # the Overview's own figure
c[3].metric("lowest measured peak", fmt_bytes(lowest) if lowest is not None else "-",
            help="over every ok partitioning of the sweep, composed ones included (as on the "
                 "Overview), not only the points drawn")
for note in fig_space.throughput_notes(sweep, points, estimate, show_estimates):
    st.caption(note)

# The selection is settled before anything is drawn: a click (read from the chart's state)
# or a choice in the box below (read from its state) moves the ring and the bars in the
# same rerun, never one rerun late. The chart's identity follows its figure, so a redrawn
# chart starts with no selection: an empty one re-arms the click.
options = list(points["balance"])
# a link's balance that is no partitioning of this model is said once, naming the key
usable = shared_balance(sweep.model.num_layers, f"the partitioning {options[0]}" if options else
                        "no partitioning")
selected = balance_str(usable) if usable else ""
if usable is None and shared("balance") is not None and options:
    remember("balance", options[0].replace("-", ","))
# a partitioning of this sweep chosen elsewhere but drawn as no point (no throughput) is
# still the selected one below: its bars are the numbers every other page shows for it
ok_runs = {balance_str(r.balance) for r in sweep.runs if r.status == "ok" and r.peaks}
if selected and selected not in options and selected in ok_runs:
    options.append(selected)
box = st.session_state.get("space-pick")
if box in options and box != st.session_state.get("space-pick-shown"):
    selected = box  # chosen in the box since the last run
clicked = fig_space.clicked_balance(st.session_state.get("space-chart"))
if clicked is None:
    st.session_state.pop("space-last-click", None)
elif clicked != st.session_state.get("space-last-click"):
    st.session_state["space-last-click"] = selected = clicked
if selected in options:  # chosen here or elsewhere: the URL and the other pages keep it
    remember("balance", selected.replace("-", ","))
else:  # a partitioning from another page that is not a point here stays the shared one
    selected = options[0] if options else None
chart(_scatter(view_key, marks, show_estimates, selected, name, points),
      key="space-chart", name="partition-space", on_select="rerun", selection_mode="points")

table = fig_space.marks_table(marks, sweep.runs, predictions + tuple(
    Prediction(m.balance, stage_peaks(profile, m.balance)) for m in marks))
st.markdown("**Recommendations** (rank: among the sweep's ok runs by measured peak; 1 = lowest)")
st.dataframe(table_view(table, BYTES), hide_index=True, key="space-marks-table")
missing = table[table["status"] == fig_space.NOT_SAMPLED]
if len(missing):
    st.caption("Not in this sample: " + ", ".join(f"{m} ({b})" for m, b in zip(missing["method"], missing["balance"]))
               + ". The sweep did not measure these picks, so they have no rank or star; open the "
                 "full sweep (Overview) or measure them on the Predict page.")
downloads(table, "mcap-recommendations-in-space", "space-marks")

st.subheader("Selected partitioning")
if options:
    st.session_state["space-pick"] = st.session_state["space-pick-shown"] = selected
    pick = st.selectbox("Partitioning (or click a point above)", options, key="space-pick")
    balance = tuple(int(n) for n in pick.split("-"))
    bars = fig_dev.device_bars(Prediction(balance, stage_peaks(profile, balance)),
                               measured_for(sweep.runs, balance),
                               sweep.setup.capacity_bytes)
    chart(fig_dev.draw_device_bars(bars, dataset=name), key="space-devices", name=f"devices-{pick}")
    st.dataframe(table_view(fig_dev.device_table(bars), BYTES), hide_index=True,
                 key="space-devices-table")

st.subheader("Prediction error")
errors = fig_space.error_stats(sweep.runs, predictions)
if errors.count == 0:
    st.info("No ok runs in this sweep to compare predictions with.")
else:
    c = st.columns(3)
    c[0].metric("partitionings compared", errors.count)
    c[1].metric("90% within", f"±{100 * errors.p90:.1f}%", help="90th percentile of |relative error|")
    c[2].metric("within the paper's ±14%", f"{100 * errors.within_paper:.0f}%")
    chart(_errors_figure(view_key, name, errors), key="space-errors", name="prediction-error")
    st.caption("Relative error = (predicted − measured) / measured peak of the fullest device. "
               "The paper reports 90% of VGG11's partitionings within 14% (section 4.2).")
downloads(points, "mcap-partition-space", "space-points")

if sweep.setup.device != "cpu":  # measured on the GPU itself: no stand-in to qualify
    st.stop()
st.subheader("CPU as a stand-in for a GPU")
stand_ins = agreement.bundled(datasets_dir())
st.markdown(
    "This sweep was measured in **CPU stage processes**: exact allocated bytes, but a "
    "GPU pays different workspaces (cuBLAS, cuDNN) and frees at different times, so the "
    "**order** of partitionings on a GPU can differ. How far, measured on the same "
    "partitionings:")
for a in stand_ins:
    r, rev = a["stats"], a["reverse"]
    lo, hi = rev.best_ranks
    st.markdown(
        f"- **{a['model']}**, {a['setup']} ({r.n:,} partitionings): Spearman "
        f"**{r.spearman:.2f}**, Kendall {r.kendall:.2f}. The CPU's lowest-peak "
        f"partitioning ranks {r.best_ranks[0]:,} on the GPU ({r.best_ratios[0]:.3f}x its "
        f"best); the GPU's best ranks {lo:,}–{hi:,} on the CPU ({rev.best_ratios[0]:.2f}x); "
        f"the two top-{r.top} lists share {r.top_shared}.")
    st.caption(f"A: {plain(a['a'])}. B: {plain(a['b'])}. {plain(a['note'])}")
if not stand_ins:
    st.caption("No rank-agreement figures are bundled (the benchmarks measure them: see the "
               "docs).")
else:
    st.caption("Use CPU runs to learn and teach how pipeline memory behaves and to check "
               "the predictor; before committing a GPU plan, measure its top picks on the GPU.")
planned = _for_cuda(str(datasets_dir()))
if planned:
    st.markdown("**Planning for a GPU from a CPU profile** (the command line's planning for "
                "CUDA: the same bytes, plus the GPU's library workspaces once per stage, its "
                "optimizer step's copies and the allocator's 512-byte blocks):")
    for check in planned:
        st.markdown("- " + for_cuda_sentence(check))
