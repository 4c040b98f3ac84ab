"""Hybrid plans (CAPTURE III): the plan with the lowest predicted per-device peak on a mesh of
N nodes x K devices (III-C), or a plan you type (``3,3,10:tp2``), drawn as the mesh's devices
coloured by stage; per-device predicted bars; a button that measures the plan for real; and
one stage's batch-size line (III-B2) when the profile has two batch sizes."""
import streamlit as st

from mcap.app import capture as app_hybrid
from mcap.app import jobs
from mcap.core.errors import McapError
from mcap.core.capture.merging import real_layers
from mcap.core.capture.plan import check_plan, parse_mesh, parse_plan
from mcap.core.capture.predict import (
    HybridCosts, batch_fit, pp_batch_sizes, profile_command, recommend_mesh,
)
from mcap.figures import capture as fig_h
from mcap.figures._style import fmt_bytes, table_view
from pages._jobs import job_panel
from pages._search import measured_runs, predictor_choice
from pages._ranks import one_stage_only
from pages._shared import (
    caption_of, chart, current, dataset_name, downloads, error, message, not_usable, remember,
    restore_url, shared, store, sweep_for)

restore_url()
st.title("Hybrid plans")
profile = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))
st.caption(caption_of(profile))
one_stage_only(profile, "Hybrid planning (CAPTURE)")
predictor = predictor_choice(st.sidebar, key="hybrid-predictor")
layers = real_layers(profile)  # plans are in the model's real layers, merged profile or not

left, right = st.columns(2)
mesh_text = left.text_input(
    "Mesh: N nodes x K devices per node", value=shared("mesh", f"1x{profile.setup.stages}"),
    key="hybrid-mesh", help="e.g. 1x4 or 2x4; a stage never spans two nodes and every device is used")
tp_sizes = app_hybrid.tp_sizes(profile)  # a tp degree must divide heads, hidden, ffn
try:
    mesh = parse_mesh(mesh_text)
    with st.spinner("searching the mesh…"):
        rec = recommend_mesh(profile, mesh, "exact", predictor=predictor, tp_sizes=tp_sizes)
except McapError as exc:
    error(exc)
    st.stop()
remember("mesh", mesh.text)
costs = HybridCosts(profile, predictor, tp_sizes=tp_sizes)

if not rec.kinds and (why := app_hybrid.pipeline_only_why(profile, mesh)) is not None:
    st.info(why)
elif not rec.kinds:
    st.info("This profile has no data- or tensor-parallel statistics, so the plans here are "
            "pipeline-only (one layer group per device). Profile the 2- and 4-way dp and tp "
            "stages (the Profile page's CAPTURE options, or the command line) to search hybrid "
            "plans:")
    st.code(profile_command(profile), language="bash")
else:
    for why in rec.missing:
        st.caption(f"Not searched: {why}")


# A plan of another mesh or model (a link's, or one kept from before) that this mesh, model
# or profile cannot show (it does not parse, does not fit, or a tp degree does not divide
# what it splits): said once, naming the key and why (issue 38 item 6), and the page starts
# from the recommendation.
start = shared("plan")
if start is not None and (why := app_hybrid.plan_problem(str(start), layers, mesh, costs)):
    not_usable("plan", start, message(why), f"the recommended plan {rec.plan.text}")
    remember("plan", None)
    start = None
start = start or rec.plan.text
typed = right.text_input(
    "Your plan", value=start, key=f"hybrid-plan-{mesh.text}-{shared('profile')}-{predictor}",
    help=f"comma-separated stages: N for N layers on one device, N:dpK or N:tpK for N layers on "
         f"K devices; the layers sum to {layers} and the degrees fill the {mesh.text} mesh")
plan, peaks = rec.plan, rec.peaks
try:
    mine = check_plan(parse_plan(typed), layers, mesh)
    plan, peaks = mine, costs.peaks(mine)
    remember("plan", None if mine == rec.plan else mine.text)  # the URL keeps a typed plan only
except McapError as exc:
    error(f"{message(exc)}. Showing the recommended plan {rec.plan.text} instead.")
for why in costs.extrapolated(plan):  # degrees beyond the profiled ones: a fit, said so
    st.warning(f"Plan {plan.text}: {why}.")

c = st.columns([3, 2]) + st.columns([3, 2])  # plan texts are long: two metrics a row
c[0].metric("recommended plan", rec.plan.text)
c[1].metric("its predicted peak", fmt_bytes(rec.peak))
c[2].metric("shown plan", plan.text)
c[3].metric("shown plan's predicted peak", fmt_bytes(max(peaks)),
            delta=None if plan == rec.plan else
            f"{100 * (max(peaks) - rec.peak) / rec.peak:+.1f}% vs recommended", delta_color="off")
st.caption(f"Exact search (dynamic programme over layers and devices) of {rec.evaluated:,} "
           f"stage placements in {rec.seconds:.3f} s; parallelisms searched: "
           f"pp{''.join(', ' + k for k in rec.kinds)}; predictor {rec.predictor}.")

# The measured peaks of this plan: a pipeline-only one's from the runs every page reads
# (the chosen sweep, the store), a measure job's once it has printed them.
s = store()
measured = app_hybrid.pipeline_measured(profile, plan, measured_runs(profile, sweep))
from_runs, result = measured is not None, None
job_state = st.session_state.get("hybrid-job")
if s is not None and job_state is not None and job_state[1] == plan.text:
    try:
        result = app_hybrid.job_result(s, job_state[0])
    except McapError:
        result = None
    if result and result.get("peaks") and len(result["peaks"]) == plan.devices:
        measured, from_runs = result["peaks"], False
if from_runs:
    st.caption(f"Measured: plan {plan.text} is pipeline-only, so its measured peaks are the "
               f"ones every page shows for partitioning {plan.text.replace(',', '-')}"
               + (f" (the sweep {dataset_name('sweep')})." if sweep is not None else "."))

frame = fig_h.mesh_frame(plan, mesh, peaks, measured)
chart(fig_h.draw_mesh(frame, mesh, f"Plan {plan.text} on mesh {mesh.text}",
                      dataset_name("profile")), key="hybrid-mesh-chart", name=f"mesh-{plan.text}")
chart(fig_h.draw_peaks(frame, f"Per-device predicted peak memory of plan {plan.text}",
                       dataset_name("profile"), profile.setup.capacity_bytes),
      key="hybrid-peaks-chart", name=f"peaks-{plan.text}")
st.dataframe(table_view(frame, ("predicted", "measured")), hide_index=True, key="hybrid-table")
downloads(frame, f"mcap-hybrid-{plan.text}", "hybrid")

st.subheader("Measure this plan")
if s is not None:
    if st.button(f"▶️ Measure {plan.text}", key="hybrid-measure"):
        try:
            job = jobs.launch(s, "measure", app_hybrid.measure_plan_args(profile, plan), total=1)
            st.session_state["hybrid-job"] = (job.id, plan.text)
            job_state = st.session_state["hybrid-job"]
        except McapError as exc:
            error(exc)
    if job_state is not None:
        st.caption(f"Job {job_state[0]} measures plan {job_state[1]}.")
        job_panel(s, job_state[0], key="hybrid")
        if measured is not None and not from_runs:
            st.success(f"Measured peak {fmt_bytes(max(measured))} vs predicted "
                       f"{fmt_bytes(max(peaks))}; the diamonds above are the measured peaks.")
        elif result is not None and not from_runs:
            st.warning(f"The measurement of {job_state[1]} ended {result.get('status')}"
                       + (f": {result['error']}" if result.get("error") else "."))

st.subheader("Batch-size line of a stage")
sizes = pp_batch_sizes(profile)
if len(sizes) < 2:
    st.caption(f"This profile has pipeline-only statistics at batch size "
               f"{profile.setup.batch_size}" + (f" and {', '.join(map(str, sizes))}" if sizes else "")
               + ": the batch-size line (III-B2) needs two more. Profile with CAPTURE's batch "
               "sizes (a quarter and a half of the batch size; an option on the Profile page).")
else:
    bounds = frame.drop_duplicates("stage")[["stage", "layers"]].values.tolist()
    pick = st.selectbox("Stage", bounds, format_func=lambda b: f"stage {b[0]} (layers {b[1]})",
                        key="hybrid-batch-stage")
    first, last = (int(x) for x in pick[1].split("-"))
    try:
        fit = batch_fit(profile, first, last, predictor)
    except McapError as exc:
        error(exc)
    else:
        chart(fig_h.draw_batch_fit(fit, dataset_name("profile")), key="hybrid-batch-chart",
              name=f"batch-line-{first}-{last}")
        st.dataframe(table_view(fig_h.batch_frame(fit), ("predicted",)), hide_index=True,
                     key="hybrid-batch-table")
