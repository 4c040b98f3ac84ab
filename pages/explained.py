"""Pipeline memory, explained: for a partitioning and a schedule, when each device holds
which micro-batch's activations and how its memory rises and falls over one iteration, from
the same per-device peaks every other page shows (mcap.core.teaching)."""
import streamlit as st

from mcap.app.press import below_least, capacity_input_mib, room
from mcap.core import memtimeline
from mcap.core.errors import McapError
from mcap.core.partition import parse_balance, validate, windows
from mcap.core.press import names, problem, solve
from mcap.core.press.effect import effect
from mcap.core.teaching import (
    SCHEDULE_NAMES, lesson, max_chunks, other_schedule, plural, state_copies,
)
from mcap.core.timeline import TIMELINE_SCHEDULES
from mcap.figures import timeline as fig_tl
from mcap.figures._style import balance_str, fmt_bytes, table_view
from pages._search import current_predictor, measured_for, measured_runs, stage_peaks
from pages._shared import (
    caption_of, chart, current, dataset_name, downloads, error, message, remember, restore_url,
    shared, shared_choice, shared_float, shared_int, sweep_for)

restore_url()
st.title("Pipeline memory, explained")
profile = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))
st.caption(caption_of(profile))
setup = profile.setup
layers = profile.model.num_layers

st.markdown(
    "In pipeline-parallel training the batch is cut into **micro-batches** that flow through "
    "the stages. A device must keep what each micro-batch's backward will need from the "
    "moment its forward runs there until its backward has run there. How many micro-batches "
    "are *in flight* on a device at once, and what each keeps, decides how full it gets.")

default_balance = shared("balance")
if default_balance is None:  # an even split until a partitioning is chosen elsewhere
    q, r = divmod(layers, setup.stages)
    default_balance = ",".join(str(q + (1 if i < r else 0)) for i in range(setup.stages))

left, mid, right = st.columns([2, 1, 1])
text = left.text_input("Partitioning (layers per device)", value=default_balance, key="tl-balance",
                       help=f"comma-separated layer counts summing to {layers}, e.g. 3,3,5,19")
# "with checkpointing" only where the profile was measured so (not on checkpoint never)
labels = {"gpipe": "GPipe" + (" with checkpointing" if setup.checkpoint != "never" else ""),
          "1f1b": "1F1B" + (" with checkpointing" if setup.checkpoint != "never" else "")}
# The dataset's own schedule first: the levels are calibrated on it (mcap.core.teaching).
own = setup.schedule if setup.schedule in TIMELINE_SCHEDULES else TIMELINE_SCHEDULES[0]
sched_default = shared_choice("schedule", TIMELINE_SCHEDULES, own)
schedule = mid.radio("Schedule", TIMELINE_SCHEDULES, format_func=labels.get, key="tl-schedule",
                     index=TIMELINE_SCHEDULES.index(sched_default),
                     help=f"the profile was measured with {SCHEDULE_NAMES.get(setup.schedule, setup.schedule)}")
# A micro-batch holds at least one sample: the profile's batch bounds the count.
most = max_chunks(setup)
chunks = int(right.number_input(
    "Micro-batches", min_value=1, max_value=most,
    value=shared_int("chunks", min(max(int(setup.chunks), 1), most), 1, most), key="tl-chunks",
    help=f"the profile's batch of {setup.batch_size} cut into 1..{most}; it was measured with "
         f"{setup.chunks}"))

try:
    balance = validate(parse_balance(text), layers).balance
    predicted = stage_peaks(profile, balance)  # Predict's numbers, by the same call
    run = measured_for(measured_runs(profile, sweep), balance) if len(balance) == setup.stages else None
    params = tuple(l.param_bytes for l in profile.model.layers)
    les = lesson(balance, schedule, chunks, setup, params, predicted, run)
except McapError as exc:
    error(exc)
    st.stop()
remember("balance", ",".join(map(str, balance)))
remember("schedule", schedule)
remember("chunks", chunks)
tl = les.timeline

st.caption(f"Each device's predicted peak at the profile's setup ({SCHEDULE_NAMES.get(setup.schedule, setup.schedule)}, "
           f"{plural(setup.chunks, 'micro-batch')}): the number every page shows for "
           f"{balance_str(balance)}; measured where this partitioning was measured.")
cols = st.columns(len(balance))
spans = windows(balance)
for d, col in enumerate(cols):
    col.metric(f"device {d}", fmt_bytes(les.predicted[d]),
               help=f"layers {spans[d][0]}-{spans[d][1]}: the predicted peak at the profile's "
                    f"setup ({current_predictor()}), as on every page")
    notes = [plural(tl.max_in_flight[d], "micro-batch") + " in flight"]
    if les.measured is not None:
        notes.insert(0, f"measured {fmt_bytes(les.measured[d])}")
    if les.levels and not les.at_profiled_setup:
        notes.append(f"{fmt_bytes(tl.peaks[d])} drawn under {SCHEDULE_NAMES[schedule]}")
    col.caption(" · ".join(notes))

for line in les.lines:
    st.markdown("- " + line)
if les.unknowns:
    st.info("**What the profile cannot tell here**\n\n" + "\n".join(f"- {u}" for u in les.unknowns))
chart(fig_tl.draw_timeline(tl, dataset=dataset_name("profile"), measured=les.measured if les.levels else None,
                           levels=les.levels),
      key="timeline-chart", name=f"timeline-{schedule}")

st.subheader("Measured, op by op")
measured_events = memtimeline.events(run)
if measured_events is None:
    st.info(f"No measured timeline for {balance_str(balance)} in this dataset: a run records one "
            "when its stages run alone (the default). "
            "Measure this partitioning on the Predict page and come back.")
else:
    chart(fig_tl.draw_measured(measured_events, dataset=dataset_name("profile"),
                               balance=balance), key="measured-timeline-chart",
          name=f"measured-timeline-{balance_str(balance)}")
    model_labels = memtimeline.model_peak_labels(tl) \
        if schedule == setup.schedule and chunks == setup.chunks and les.levels else None
    for line in memtimeline.sentences(measured_events, les.predicted, model_labels):
        st.markdown("- " + line)
    measured_table = fig_tl.measured_frame(measured_events)
    st.dataframe(table_view(measured_table, ("before", "peak", "after")), hide_index=True,
                 key="measured-timeline-table", height=240)
    downloads(measured_table, f"mcap-measured-timeline-{balance_str(balance)}",
              "measured-timeline")

other, counts = other_schedule(schedule, len(balance), chunks)
st.caption(f"Under {SCHEDULE_NAMES[other]} the same partitioning would have "
           + ", ".join(str(h) for h in counts)
           + f" micro-batches in flight on devices 0..{len(balance) - 1}.")
if les.levels:
    mem = fig_tl.memory_frame(tl)
    st.dataframe(table_view(mem, ("memory",)), hide_index=True, key="timeline-table", height=240)
    downloads(mem, f"mcap-timeline-{schedule}", "timeline")

st.subheader("A memory-saving plan over this iteration")
if profile.press is None:
    st.info("With MPress statistics (a profile measured without checkpointing, with the memory "
            "savers' statistics) this section shows what a plan moves out of a device and brings "
            "back, and when. The Memory savers page opens a bundled profile that has them.")
    st.stop()
if not les.levels:
    st.info(f"The plan is drawn over the levels, which need the profile's {setup.chunks} "
            "micro-batches: set Micro-batches back to it.")
    st.stop()
try:  # the same predicted peaks as the header (the page's predictor)
    before = problem(profile, balance, None, current_predictor())
    space = room(before, params, state_copies(setup))
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
    plan = solve(problem(profile, balance, capacity, current_predictor()), capacity, method)
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
chart(fig_tl.draw_press_effect(tl, eff, dataset=dataset_name("profile")), key="press-effect-chart",
      name=f"press-effect-{device}")
events = fig_tl.effect_frame(eff)
st.dataframe(table_view(events, ("bytes",)), hide_index=True, key="press-effect-table", height=240)
