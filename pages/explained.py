"""Pipeline memory, explained: for a partitioning and a schedule, when each device holds
which micro-batch's activations and how its memory rises and falls over one iteration."""
import streamlit as st

from mcap.app.press import below_least, capacity_input_mib
from mcap.core.errors import McapError
from mcap.figures import timeline as fig_tl
from mcap.figures._style import balance_str, fmt_bytes, table_view
from mcap.core.partition import parse_balance, validate
from mcap.core.predict import predict
from mcap.core.timeline import TIMELINE_SCHEDULES, explain, max_in_flight, simulate, stage_memory
from mcap.core.press import METHODS, problem, smallest_capacity, solve
from mcap.core.press.effect import effect
from pages._shared import (
    caption_of, chart, current, dataset_name, downloads, remember, restore_url, shared,
)

restore_url()
st.title("Pipeline memory, explained")
profile = current("profile")
st.caption(caption_of(profile))
setup = profile.setup
layers = profile.model.num_layers

st.markdown(
    "In pipeline-parallel training the batch is cut into **micro-batches** that flow through "
    "the stages. A device must keep what each micro-batch's backward will need from the "
    "moment its forward runs there until its backward has run there. How many micro-batches "
    "are *in flight* on a device at once decides how full it gets.")

default_balance = shared("balance")
if default_balance is None:  # an even split until a partitioning is chosen elsewhere
    q, r = divmod(layers, setup.stages)
    default_balance = ",".join(str(q + (1 if i < r else 0)) for i in range(setup.stages))

left, mid, right = st.columns([2, 1, 1])
text = left.text_input("Partitioning (layers per device)", value=default_balance, key="tl-balance",
                       help=f"comma-separated layer counts summing to {layers}, e.g. 3,3,5,19")
# "with checkpointing" only where the profile was measured so (not on checkpoint never)
labels = {"gpipe": "GPipe" + (" with checkpointing" if setup.checkpoint != "never" else ""),
          "1f1b": "1F1B"}
# The dataset's own schedule first: the levels are calibrated on it (stage_memory).
own = setup.schedule if setup.schedule in TIMELINE_SCHEDULES else TIMELINE_SCHEDULES[0]
sched_default = shared("schedule", own)
schedule = mid.radio("Schedule", TIMELINE_SCHEDULES, format_func=labels.get, key="tl-schedule",
                     index=TIMELINE_SCHEDULES.index(sched_default if sched_default in TIMELINE_SCHEDULES else own),
                     help=f"the profile was measured with {labels.get(setup.schedule, setup.schedule)}")
# A profile's chunk count may exceed the widget's range: start at the nearest allowed value.
chunks = right.number_input("Micro-batches", min_value=1, max_value=32,
                            value=min(max(int(setup.chunks), 1), 32),
                            key="tl-chunks")

try:
    balance = validate(parse_balance(text), layers).balance
    prediction = predict(profile.stats, balance)
    params = tuple(l.param_bytes for l in profile.model.layers)
    copies = 4 if setup.optimizer == "adam" else 3
    memory = stage_memory(balance, params, prediction.peaks, setup.schedule, setup.chunks, copies)
    tl = simulate(balance, schedule, int(chunks), memory)
except McapError as exc:
    st.error(str(exc))
    st.stop()
remember("balance", ",".join(map(str, balance)))
remember("schedule", schedule)

held = tl.max_in_flight
cols = st.columns(len(balance))
for d, col in enumerate(cols):
    col.metric(f"device {d}", f"{held[d]} in flight", help=f"layers {tl.balance[d]}; peak {fmt_bytes(tl.peaks[d])}")
    col.caption(f"peak {fmt_bytes(tl.peaks[d])}")

for line in explain(tl):
    st.markdown("- " + line)
chart(fig_tl.draw_timeline(tl, dataset=dataset_name("profile")), key="timeline-chart",
      name=f"timeline-{schedule}")

other = "1f1b" if schedule == "gpipe" else "gpipe"
st.info(f"Under {labels[other]} the same partitioning would hold "
        + ", ".join(str(h) for h in max_in_flight(other, len(balance), int(chunks)))
        + f" micro-batches per device (devices 0..{len(balance) - 1}).")
with st.expander("How the memory levels are estimated"):
    st.markdown(
        f"Parameter state (weights, gradients, optimizer state: {copies} copies of the "
        "parameters) stays the whole iteration. The rest of each stage's peak as mCAP predicts "
        f"it for {balance_str(balance)} is shared equally among the micro-batches the stage holds "
        f"at its peak under the profiled schedule ({labels.get(setup.schedule, setup.schedule)}, "
        f"{setup.chunks} micro-batches). The schedule above is exact; the levels are a teaching "
        "approximation that does not separate recomputed activations from kept stage inputs.")
mem = fig_tl.memory_frame(tl)
st.dataframe(table_view(mem, ("memory",)), hide_index=True, key="timeline-table", height=240)
downloads(mem, f"mcap-timeline-{schedule}", "timeline")

st.subheader("A memory-saving plan over this iteration")
if profile.press is None:
    st.info("With MPress statistics (`python -m mcap profile ... --checkpoint never --press`) this "
            "section shows what a plan moves out of a device and brings back, and when.")
    st.stop()
try:
    before = problem(profile, balance)
except McapError as exc:
    st.info(str(exc))
    st.stop()
least, top = smallest_capacity(before), max(before.base)
a, b, c = st.columns(3)
cap_mib = a.number_input("Capacity per device (MiB)", min_value=0.01, step=1.0,
                         value=capacity_input_mib(setup.capacity_bytes or (least + top) // 2),
                         key="tl-press-capacity",
                         help=f"keep-all peak {fmt_bytes(top)}; the least any plan reaches "
                              f"{fmt_bytes(least)}")
method = b.selectbox("Planner", list(METHODS), key="tl-press-method")
device = c.selectbox("Device", list(range(len(balance))), key="tl-press-device",
                     index=max(range(len(balance)), key=lambda s: before.base[s]))
capacity = int(cap_mib * 2**20)
try:
    plan = solve(problem(profile, balance, capacity), capacity, method)
    # levels calibrated on the planner's keep-all peaks, so both curves share its scale
    tl_p = simulate(balance, schedule, int(chunks),
                    stage_memory(balance, params, before.base, setup.schedule, setup.chunks, copies))
    eff = effect(before, [x for stage in plan.stages for x in stage], tl_p, device)
except McapError as exc:
    hint = below_least(capacity, least)
    st.error(str(exc) + ("" if hint is None else f". {hint}"))
    st.stop()
st.caption(f"Plan ({method}) under {fmt_bytes(capacity)}: device {device}'s predicted peak "
           f"{fmt_bytes(before.base[device])} before, {fmt_bytes(plan.predicted_peaks[device])} "
           f"after; {plan.predicted_added_seconds:.4f} s added per iteration. The curve shows "
           "when bytes leave and return on the teaching timeline above; the predicted peak also "
           "counts the one micro-batch brought back in backward.")
chart(fig_tl.draw_press_effect(tl_p, eff, dataset=dataset_name("profile")), key="press-effect-chart",
      name=f"press-effect-{device}")
events = fig_tl.effect_frame(eff)
st.dataframe(table_view(events, ("bytes",)), hide_index=True, key="press-effect-table", height=240)
