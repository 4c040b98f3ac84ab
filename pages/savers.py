"""Memory savers (MPress II-III): for a partitioning over capacity, what recomputation, host
swap and device-to-device swap would free on each device, the plan as a layer x stage grid,
its predicted added time, and a button that measures the plan for real."""
import streamlit as st

from mcap.app import jobs
from mcap.app.press import (
    below_least, best_room, capacity_input_mib, measure_plan_args, measured_keep_all, room,
    write_plan,
)
from mcap.core.errors import McapError
from mcap.core.partition import parse_balance, validate
from mcap.core.press import get, names, problem, solve
from mcap.figures import press as fig_press
from mcap.figures._style import balance_str, fmt_bytes, table_view
from pages._jobs import job_panel, measure_args
from pages._search import predictor_choice, recommendation
from mcap.core.teaching import state_copies
from pages._shared import (
    caption_of, chart, choose_profile, current, dataset_label, dataset_name, downloads, error,
    message, open_dataset, press_profiles, remember, restore_url, shared, shared_balance,
    shared_choice, shared_float, store)

restore_url()
st.title("Memory savers")
profile = current("profile")
previous = shared("profile")
st.caption(caption_of(profile))
predictor = predictor_choice(st.sidebar, key="savers-predictor")
if profile.press is None:
    st.info("This profile has no MPress statistics (activation bytes saved for backward, "
            "forward times, host and device-to-device bandwidth). Profile the model without "
            "checkpointing and with the savers' statistics, from the command line (the MPress "
            "guide in the docs), then open the profile here:")
    st.code(f"python -m mcap profile --model {profile.model.spec} --stages "
            f"{profile.setup.stages} --checkpoint never --press --out FILE", language="bash")
    for ref in press_profiles():
        if st.button(f"Open {ref}, a profile with them", key=f"savers-open-{ref.param}"):
            # Open it where a plan lowers the fullest device (issue 40, item 14: mCAP's pick
            # 16-10-1-3 is one no plan lowers), computed from its data.
            spot = best_room(open_dataset(ref.param), predictor)
            choose_profile(ref.param)  # the chosen profile of every page, with its sweep
            remember("balance", ",".join(map(str, spot.balance)))
            remember("plan_capacity", capacity_input_mib(spot.default_capacity()))
            st.session_state["savers-opened"] = (ref.param, previous)
            st.rerun()
    st.stop()
opened = st.session_state.pop("savers-opened", None)
if opened is not None and opened[0] == shared("profile"):
    st.success(f"The chosen profile is now {dataset_label(opened[0])} on every page (it was "
               f"{dataset_label(opened[1])}); it opens where a plan lowers the fullest device.")

layers, setup = profile.model.num_layers, profile.setup
shared_bal = shared_balance(layers, "mCAP's pick")  # one that cannot be used is said once
# else start from mCAP's pick: the partitioning MPress starts from
default = ",".join(map(str, shared_bal or recommendation(profile, setup.stages, "exact").balance))
left, mid, right = st.columns(3)
text = left.text_input("Layers per device", value=default, key="savers-balance",
                       help=f"comma-separated layer counts summing to {layers}")
planners = list(names())
method = right.selectbox("Planner", planners, key="savers-method",
                         index=planners.index(shared_choice("planner", planners, planners[0])),
                         help="; ".join(f"{k}: {get(k).help}" for k in planners))
try:
    balance = validate(parse_balance(text), layers).balance
except McapError as exc:
    error(exc)
    st.stop()
s = store()
measured = measured_keep_all(s, profile, balance) if s is not None else None
use_measured = measured is not None and st.sidebar.checkbox(
    "Plan from the measured keep-all run", value=True, key="savers-measured",
    help="a run of this partitioning with every layer kept, on this machine, is in the "
         "store: plan from its peaks instead of predicted ones (press --measure-base)")
try:
    before = problem(profile, balance, None, predictor, base=measured if use_measured else None)
except McapError as exc:
    error(exc)
    st.stop()
remember("balance", ",".join(map(str, balance)))
space = room(before, [l.param_bytes for l in profile.model.layers], state_copies(setup))
least, top = space.least, space.top
if space.sentence():
    st.info(space.sentence())
start = setup.capacity_bytes or space.default_capacity()
capacity_mib = mid.number_input("Capacity per device (MiB)", min_value=0.01,
                                value=shared_float("plan_capacity", capacity_input_mib(start), 0.01, 10.0**9),
                                step=1.0, key="savers-capacity",
                                help=f"keep-all peak {fmt_bytes(top)}; the least any plan "
                                     f"reaches {fmt_bytes(least)}")
remember("plan_capacity", capacity_mib)
remember("planner", method)
capacity = int(capacity_mib * 2**20)
try:
    p = problem(profile, balance, capacity, predictor, base=before.base)
    plan = solve(p, capacity, method)
except McapError as exc:
    hint = below_least(capacity, least)
    error(message(exc) + ("" if hint is None else f". {hint}"))
    st.stop()

c = st.columns(4)
c[0].metric("peak before", fmt_bytes(top))
c[1].metric("peak after", fmt_bytes(max(plan.predicted_peaks)))
c[2].metric("predicted added time", f"{plan.predicted_added_seconds:.4f} s")
counts = plan.counts()
c[3].metric("layers reduced", f"{len(p.saved) - counts['keep']} of {len(p.saved)}")
if top <= capacity and space.worth:
    st.success(f"Partitioning {balance_str(balance)} fits {fmt_bytes(capacity)} without a plan.")
table = fig_press.savers_table(p, plan)
chart(fig_press.draw_savers(table, capacity, balance, dataset_name("profile")),
      key="savers-bars", name=f"savers-{balance_str(balance)}")
st.dataframe(table_view(fig_press.screen_table(table), (
    "before", "after", "lower then", "recompute", "swap", "d2d", "received", "transient",
    "segment")), hide_index=True, key="savers-table")
st.caption("Each device at the moment its peak falls under the plan (MPress's live intervals: "
           "the stage's iteration is followed event by event). A plan can move the peak: "
           "*lower then* is how far below its own peak keep-all stood at that moment. "
           "Columns that are zero on every device are left out; the downloads have them all. "
           + ("Before: measured now with every layer kept." if use_measured else
              "Before: predicted. Measure the partitioning with every layer kept (below) to "
              "plan from measured peaks."))
downloads(table, f"mcap-savers-{balance_str(balance)}", "savers")
chart(fig_press.draw_plan_grid(plan, dataset_name("profile")), key="savers-grid",
      name=f"plan-{balance_str(balance)}")

st.subheader("Measure this plan")
if len(balance) != setup.stages:
    st.info(f"Measuring needs {setup.stages} stages (the profile's setup); this partitioning "
            f"has {len(balance)}.")
else:
    if s is not None and measured is None and st.button(
            f"▶️ Measure {balance_str(balance)} with every layer kept (to plan from it)",
            key="savers-measure-base"):
        try:
            job = jobs.launch(s, "measure", [*measure_args(profile, balance), "--json"], total=1)
            st.session_state["savers-job"] = job.id
        except (McapError, OSError) as exc:
            error(exc, "Could not start the measurement: ")
    if s is not None and st.button(f"▶️ Measure {balance_str(balance)} with this plan",
                                   key="savers-measure"):
        try:
            path = write_plan(s, plan)
            args = measure_plan_args(measure_args(profile, balance), path, capacity)
            job = jobs.launch(s, "measure", args, total=1)
            st.session_state["savers-job"] = job.id
        except (McapError, OSError) as exc:
            error(exc, "Could not start the measurement: ")
    if s is not None and st.session_state.get("savers-job"):
        job_panel(s, st.session_state["savers-job"], key="savers")
