"""Pipeline memory, explained: for a partitioning and any registered schedule, when each device
holds which micro-batch's activations and how its memory rises and falls over one iteration,
drawn from the schedule's action list (the order torch runs) and the same per-stage peaks
every other page shows (mcap.core.teaching); a time cursor steps through it."""
import streamlit as st

from mcap.app.press import below_least, capacity_input_mib, room
from mcap.core import memtimeline, predictors, schedules, teachstats
from mcap.core.errors import McapError
from mcap.core.partition import parse_balance, validate, windows
from mcap.core.press import names, problem, solve
from mcap.core.press.effect import effect
from mcap.core.teaching import fitting_chunks, label, max_chunks, plural, run_setup_text, state_copies, twin_note
from mcap.core.teachwords import step_sentence
from mcap.figures import teaching as fig_teach
from mcap.figures import timeline as fig_tl
from mcap.figures._style import balance_str, fmt_bytes, table_view
from pages import _teaching as cached
from pages._search import current_predictor
from pages._ranks import one_stage_only
from pages._shared import (
    caption_of, chart, choices, current, dataset_name, downloads, error, message, open_dataset,
    profile_param, remember, restore_url, shared, shared_choice, shared_float, shared_int,
    sweep_for)

restore_url()
st.title("Pipeline memory, explained")
profile = chosen = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))
param = profile_param() or choices("profile")[0].param
shown = dataset_name("profile")
st.caption(caption_of(profile))
one_stage_only(profile, "The teaching view")
st.markdown(
    "In pipeline-parallel training the batch is cut into **micro-batches** that flow through "
    "the stages. A device must keep what each micro-batch's backward will need from the "
    "moment its forward runs there until its backward has run there. How many micro-batches "
    "are *in flight* on a device at once, and what each keeps, decides how full it gets.")

# The usual lesson (fewer in flight, less memory) needs a profile without checkpointing: a
# checkpointed one keeps only stage inputs in flight (mcap.core.teaching, issue 40, 6).
twin = cached.never_twin(param, cached.revision(param))
if twin is not None and st.toggle("Without checkpointing", key="tl-never",
                                  help="the same view from the bundled profile measured with "
                                       "checkpoint never, where the micro-batches in flight "
                                       "keep their activations"):
    sweep, param, profile = None, twin, open_dataset(twin)
    shown = twin.split(":", 1)[-1]
    st.caption(twin_note(chosen, profile))
setup = profile.setup
layers = profile.model.num_layers
G = setup.stages

names_ = list(schedules.names())
ck = " with checkpointing" if setup.checkpoint != "never" else ""
top_row = st.columns([3, 2, 1, 1])
schedule = top_row[1].selectbox(
    "Schedule", names_, key="tl-schedule", format_func=lambda n: label(n) + ck,
    index=names_.index(shared_choice("schedule", names_, setup.schedule
                                     if setup.schedule in names_ else schedules.DEFAULT)),
    help=f"every schedule torch runs, drawn from its own action list; the profile was "
         f"measured with {label(setup.schedule)}")
spec = schedules.get(schedule)
if spec.stages_per_rank == "many":
    virtual = int(top_row[2].number_input(
        "Stages per device", min_value=1, max_value=max(1, min(schedules.MAX_VIRTUAL, layers // G)),
        value=min(spec.virtual(None), max(1, layers // G)), key="tl-virtual",
        help="V: each device holds V stages of the model, placed r, r+G, ..."))
else:
    virtual = spec.virtual(None)
    top_row[2].metric("Stages per device", virtual)
most = max_chunks(setup)  # a micro-batch holds at least one sample: the batch bounds the count
chunks = int(top_row[3].number_input(
    "Micro-batches", min_value=1, max_value=most,
    value=shared_int("chunks", min(max(int(setup.chunks), 1), most), 1, most), key="tl-chunks",
    help=f"the profile's batch of {setup.batch_size} cut into 1..{most}; it was measured with "
         f"{setup.chunks}"))
asked = chunks
try:  # a schedule torch runs only with more micro-batches is drawn with the nearest it takes
    chunks, why = fitting_chunks(schedule, G, virtual, chunks, most)
except McapError as exc:
    error(exc)
    st.stop()
if why:
    st.info(f"{label(schedule)}: {why}. Drawn with {plural(chunks, 'micro-batch')}.")
n = G * virtual
default_balance = shared("balance") if n == G else None
if default_balance is None:  # an even split until a partitioning is chosen elsewhere
    q, r = divmod(layers, n)
    default_balance = ",".join(str(q + (1 if i < r else 0)) for i in range(n))
text = top_row[0].text_input(
    "Partitioning (layers per device)" if n == G else "Partitioning (layers per stage)",
    value=default_balance,
    key="tl-balance" if n == G else f"tl-balance-{n}",
    help=f"{n} comma-separated layer counts summing to {layers}"
         + (f" ({G} devices x {virtual} stages)" if virtual > 1 else ", e.g. 3,3,5,19"))

predictor = current_predictor()
try:
    balance = validate(parse_balance(text), layers).balance
    requests = cached.requests_for(setup, G, chunks, schedule, virtual)
    with st.spinner("Asking torch for the schedules' action lists…"):
        lists = cached.action_lists(requests)
    run, run_setup = cached.measured(profile, sweep, balance, schedule, virtual, chunks)
    les = cached.lesson(param, cached.revision(param), predictor, balance, requests[names_.index(schedule)],
                        requests[-1], cached.run_key(run), run, run_setup)
except McapError as exc:
    error(exc)
    st.stop()
remember("schedule", schedule)
remember("chunks", asked)
if n == G:
    remember("balance", ",".join(map(str, balance)))
tl = les.timeline

if virtual == 1:
    st.caption(f"Each device's predicted peak at the profile's setup ({label(setup.schedule)}, "
               f"{plural(setup.chunks, 'micro-batch')}): the number every page shows for "
               f"{balance_str(balance)}; measured where this partitioning was measured.")
else:
    st.caption(f"Each device's highest level drawn under {label(schedule)}: the sum of its "
               f"{virtual} stages' models, each calibrated on the predicted peak of its layers.")
cols = st.columns(G)
spans = windows(balance)
profiled_run = run if run_setup == setup else None
for d, col in enumerate(cols):
    stages_of = tl.chunk_of_device(d)
    if virtual == 1:
        col.metric(f"device {d}", fmt_bytes(les.predicted[d]),
                   help=f"layers {spans[d][0]}-{spans[d][1]}: the predicted peak at the profile's "
                        f"setup ({predictor}), as on every page")
    else:
        col.metric(f"device {d}", fmt_bytes(tl.peaks[d]) if les.levels else "–",
                   help="stages " + ", ".join(f"{c} (layers {spans[c][0]}-{spans[c][1]})"
                                               for c in stages_of))
    notes = [plural(tl.max_in_flight[d], "micro-batch") + " in flight"]
    if profiled_run is not None and profiled_run.status == "ok" and virtual == 1:
        notes.insert(0, f"measured {fmt_bytes(profiled_run.peaks[d])} ({label(setup.schedule)})")
    if les.levels and not les.at_profiled_setup and virtual == 1:
        notes.append(f"{fmt_bytes(tl.peaks[d])} drawn under {label(schedule)}")
    col.caption(" · ".join(notes))

for line in les.lines:
    st.markdown("- " + line)
if les.unknowns:
    st.info("**What the profile cannot tell here**\n\n" + "\n".join(f"- {u}" for u in les.unknowns))

# Step through the schedule (issue 40, 8): a time cursor over the same action list.
key = f"tl-step-{schedule}-{virtual}-{chunks}-{tl.steps}"
top = max(range(G), key=lambda d: tl.peaks[d])
if key not in st.session_state:
    st.session_state[key] = tl.peak_steps[top] if les.levels else 0


def _move(by: int) -> None:
    st.session_state[key] = min(max(st.session_state[key] + by, 0), tl.steps - 1)


back, slider, forward = st.columns([1, 10, 1])
back.button("◀", key="tl-step-back", on_click=_move, args=(-1,), help="one step back")
forward.button("▶", key="tl-step-next", on_click=_move, args=(1,), help="one step on")
step = slider.slider("Time step", 0, tl.steps - 1, key=key,
                     help="move the cursor: the boxes running then are outlined, each device's "
                          "held micro-batches are listed below, its level is marked")
measured_label = run_setup_text(run_setup) if les.measured is not None else ""
chart(fig_tl.draw_timeline(tl, dataset=shown, levels=les.levels,
                           measured=les.measured if les.levels else None, label=label(schedule),
                           measured_label=measured_label, cursor=step),
      key="timeline-chart", name=f"timeline-{schedule}")
st.markdown(step_sentence(tl, step, les.levels))
now = fig_tl.step_frame(tl, step)
st.dataframe(table_view(now if les.levels else now.drop(columns=["memory"]), ("memory",)),
             hide_index=True, key="timeline-step-table")

st.subheader("Every schedule on this pipeline")
st.caption(f"{G} devices, {plural(chunks, 'micro-batch')}: each schedule's action list as torch "
           "runs it, the most micro-batches each device holds at once, and the share of the "
           "devices' time left idle (a forward 1 step, a backward 2).")
st.dataframe(fig_teach.schedules_frame({r[0]: lists[r] for r in requests[:len(names_)]},
                                       {n_: label(n_) for n_ in names_}),
             hide_index=True, key="schedules-table")
if les.levels:
    mem = fig_tl.memory_frame(tl)
    with st.expander("Every step's level, as a table"):
        st.dataframe(table_view(mem, ("memory",)), hide_index=True, key="timeline-table", height=240)
        downloads(mem, f"mcap-timeline-{schedule}", "timeline")

# From the statistics to the numbers (issue 40, 9).
st.subheader("From the profile's statistics to these numbers")
if virtual == 1:
    pred_label = predictors.get(predictor).label if predictor in predictors.names() else predictor
    st.markdown(teachstats.statistics_paragraph(
        profile.stats, [l.name for l in profile.model.layers], balance, les.predicted, pred_label))
    chart(fig_teach.draw_stats(teachstats.statistics_rows(profile.stats, balance, les.predicted),
                               shown, pred_label),
          key="stats-chart", name="statistics")
try:
    by_params, by_memory = cached.splits(param, cached.revision(param), predictor, G)
    st.markdown(teachstats.balance_paragraph(
        by_params, by_memory, [l.param_bytes for l in profile.model.layers],
        state_copies(setup), "the params method", "mCAP's exact search"))
except McapError as exc:
    st.info(message(exc))

st.subheader("Measured, op by op")
measured_events = memtimeline.events(profiled_run)
if measured_events is None:
    st.info(f"No measured timeline for {balance_str(balance)} in this dataset: a run records one "
            "when its stages run alone (the default). "
            "Measure this partitioning on the Predict page and come back.")
else:
    chart(fig_tl.draw_measured(measured_events, dataset=shown,
                               balance=balance), key="measured-timeline-chart",
          name=f"measured-timeline-{balance_str(balance)}")
    model_labels = memtimeline.model_peak_labels(tl) if les.at_profiled_setup else None
    for line in memtimeline.sentences(measured_events, les.predicted, model_labels):
        st.markdown("- " + line)
    measured_table = fig_tl.measured_frame(measured_events)
    st.dataframe(table_view(measured_table, ("before", "peak", "after")), hide_index=True,
                 key="measured-timeline-table", height=240)
    downloads(measured_table, f"mcap-measured-timeline-{balance_str(balance)}",
              "measured-timeline")

st.subheader("A memory-saving plan over this iteration")
if profile.press is None:
    st.info("With MPress statistics (a profile measured without checkpointing, with the memory "
            "savers' statistics) this section shows what a plan moves out of a device and brings "
            "back, and when. The Memory savers page opens a bundled profile that has them.")
    st.stop()
if not les.levels or spec.stages_per_rank != "one" or spec.split_backward:
    st.info(f"The plan is drawn over the levels of a schedule of one stage per device at the "
            f"profile's {setup.chunks} micro-batches: choose one and set Micro-batches back to it.")
    st.stop()
try:  # the same predicted peaks as the header (the page's predictor)
    before = problem(profile, balance, None, predictor)
    space = room(before, [l.param_bytes for l in profile.model.layers], state_copies(setup))
except McapError as exc:
    st.info(str(exc))
    st.stop()
if space.sentence():
    st.info(space.sentence())
a, b, c = st.columns(3)
cap_mib = a.number_input("Capacity per device (MiB)", min_value=0.01, step=1.0,
                         value=shared_float("plan_capacity", capacity_input_mib(
                             setup.capacity_bytes or space.default_capacity()), 0.01, 10.0**9),
                         key="tl-press-capacity",
                         help=f"keep-all peak {fmt_bytes(space.top)}; the least any plan reaches "
                              f"{fmt_bytes(space.least)}")
methods = list(names())
method = b.selectbox("Planner", methods, key="tl-press-method",
                     index=methods.index(shared_choice("planner", methods, methods[0])))
devices = list(range(len(balance)))
device = c.selectbox("Device", devices, key="tl-press-device",
                     index=shared_int("plan_device", space.device, 0, len(balance) - 1))
remember("plan_capacity", cap_mib)
remember("planner", method)
remember("plan_device", device)
capacity = int(cap_mib * 2**20)
try:
    plan = solve(problem(profile, balance, capacity, predictor), capacity, method)
    eff = effect(before, [x for stage in plan.stages for x in stage], tl, device)
except McapError as exc:
    hint = below_least(capacity, space.least)
    error(message(exc) + ("" if hint is None else f". {hint}"))
    st.stop()
reduced = sum(1 for x in plan.stages[device] if x.action != "keep")
st.caption(f"Plan ({method}) under {fmt_bytes(capacity)}: device {device}'s predicted peak "
           f"{fmt_bytes(before.base[device])} before, {fmt_bytes(plan.predicted_peaks[device])} "
           f"after ({plural(reduced, 'layer')} of its {balance[device]} reduced); "
           f"{plan.predicted_added_seconds:.4f} s added per iteration. The curve shows when bytes "
           "leave and return over the iteration above; the predicted peak also counts the one "
           "micro-batch brought back in backward.")
chart(fig_tl.draw_press_effect(tl, eff, dataset=shown), key="press-effect-chart",
      name=f"press-effect-{device}")
events = fig_tl.effect_frame(eff)
st.dataframe(table_view(events, ("bytes",)), hide_index=True, key="press-effect-table", height=240)
