"""Recommend: run a search method (exact, bf, bo; paper 3.4) with its settings, watch bo's
best-so-far curve grow, compare every method and baseline, and copy a ready snippet."""
import streamlit as st

from mcap.app import searches
from mcap.core.errors import McapError
from mcap.core.search import DEFAULT, get, names
from mcap.models.spec import is_trusted, is_user_spec, untrusted_note
from mcap.figures import recommend as fig_rec
from mcap.figures import snippet
from mcap.figures._style import balance_str, fmt_bytes, table_view
from mcap.app.ranks import is_multi
from pages._accuracy import show_accuracy
from pages._ranks import recommend_page
from pages._search import (
    bo_run, measured_runs, method_label, methods, predictor_choice, quick, recommendation,
    start_time, time_left_out, time_pick, time_state,
)
from pages._shared import (
    caption_of, chart, current, dataset_name, downloads, error, not_usable, remember,
    restore_url, shared_choice, shared_int, sweep_for)

restore_url()
st.title("Recommend")
profile = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))
st.caption(caption_of(profile))
if is_multi(profile.setup):  # several chunks per rank: the schedules' op model, rank by rank
    recommend_page(profile, sweep)
    st.stop()
layers = profile.model.num_layers
# Methods that time the real model (time) are baselines, timed below.
SEARCHES = names(needs_model=False)

a, b, c, d = st.columns(4)
method = shared_choice("method", methods(), DEFAULT)  # said once if it names no method at all
if method not in SEARCHES:  # time: a baseline, timed below; said once like any other value
    not_usable("method", method, f"{method_label(method)} times the real model: it is a "
               "baseline, timed below in the table of all methods, not a search to run here",
               DEFAULT)
    method = DEFAULT
method = a.selectbox("Method", SEARCHES, index=SEARCHES.index(method),
                     key="rec-method", format_func=method_label,
                     help=" ".join(f"**{m}**: {get(m).help}." for m in SEARCHES))
on_demand = get(method).on_demand  # minutes of search: run in the background when asked
label = method_label(method)  # what the page says; the URL and the exports keep the name
predictor_choice(d, key="rec-predictor")
stages = int(b.number_input("Stages", 1, layers, value=shared_int("stages", profile.setup.stages, 1, layers),
                            key="rec-stages"))
tolerance = c.number_input("Tie tolerance (%)", 0.0, 100.0, value=0.0, step=1.0, key="rec-tol",
                           disabled=on_demand,
                           help="peaks within this fraction of the lowest count as tied; ties are "
                                "broken by dropping the fullest device and comparing the rest "
                                "(paper 3.4). Applies to exact and bf.")
remember("method", method)
remember("stages", stages)
tol = {"tie_tolerance": tolerance / 100} if tolerance else {}

rec = None
if on_demand:
    a, b = st.columns(2)
    iterations = int(a.number_input(f"{label}: evaluations", 2, 500,
                                    value=shared_int("iterations", 75, 2, 500),
                                    key="rec-iters", help="the paper uses 75 (section 4.1); each "
                                    "one refits a Gaussian process, so later ones are slower"))
    seed = int(b.number_input("seed", 0, 10**6, value=shared_int("seed", 0, 0, 10**6),
                              key="rec-seed"))
    remember("seed", seed)
    remember("iterations", iterations)
    run = bo_run(profile, stages, seed, iterations, method=method)
    if run is None and st.button(f"🔎 Run {label} ({iterations} evaluations)", type="primary",
                                 key="rec-run"):
        run = bo_run(profile, stages, seed, iterations, start=True, method=method)
    if run is None:
        st.info(f"{label} runs only when asked: press **Run {label}**. Its best-so-far curve "
                "grows here as it runs, and the search goes on if you visit other pages.")
    else:
        try:
            optimum = recommendation(profile, stages, DEFAULT).predicted_peak
        except McapError:
            optimum = None

        @st.fragment(run_every=None if run.finished else 0.5)
        def bo_curve():
            done = len(run.curve)
            st.progress(done / run.iterations, text=f"{label}: {done} of {run.iterations} evaluations"
                        + ("" if run.finished else " (running)"))
            st.caption(f"{run.elapsed:.1f} s elapsed · {run.rate:.2f} evaluations/s · each "
                       "evaluation refits a Gaussian process, so later ones are slower"
                       + ("" if optimum is None else f" · exact optimum {fmt_bytes(optimum)} "
                          f"({optimum:,} bytes)"))
            if not run.finished and st.button(f"⏹️ Stop {label}", key="rec-stop"):
                run.stop()
            if run.curve and get(method).draws_curve:
                chart(fig_rec.draw_curve(fig_rec.curve_frame(tuple(run.curve)), optimum,
                                         dataset=dataset_name("profile"), method=method),
                      key="rec-curve", name=f"{method}-curve")
            if run.finished and not st.session_state.get(f"bo-shown-{id(run)}"):
                st.session_state[f"bo-shown-{id(run)}"] = True
                st.rerun(scope="app")  # draw the result and the table with it in
        bo_curve()
        if run.error:
            st.error(run.error)
        rec = run.result
else:
    try:
        with st.spinner(f"{label} is searching…"):
            rec = recommendation(profile, stages, method, **tol)
    except McapError as exc:
        error(exc)
        st.stop()

if rec is not None:
    remember("balance", ",".join(map(str, rec.balance)))
    c = st.columns(4)
    c[0].metric("recommended", balance_str(rec.balance))
    c[1].metric("predicted peak", fmt_bytes(rec.predicted_peak))
    c[2].metric("search time", f"{rec.seconds:.3f} s")
    c[3].metric("evaluated", f"{rec.evaluated:,}",
                help="brute force: partitionings; exact: steps of the dynamic programme; "
                     "Bayesian search: evaluations of the objective")
acc = show_accuracy(profile, sweep)

st.subheader("All methods and baselines")
rows = []
for name in quick():
    # the method chosen above has run already (cached): its row costs nothing
    skip = None if name == method else searches.render_skip(name, layers, stages)
    if skip is not None:
        st.caption(skip)
        continue
    try:
        rows.append(recommendation(profile, stages, name, **(tol if get(name).tolerance else {})))
    except McapError as exc:  # a split whose rule does not exist here (issue 41): a note
        (st.caption if get(name).partial else st.warning)(f"{method_label(name)}: {exc}")
if on_demand and rec is not None:
    rows.insert(2, rec)  # on demand only when asked for: it takes minutes, not milliseconds
timed = time_pick(profile, stages)
timing, time_error = time_state(profile, stages)
if timed is not None:
    rows.append(timed)
elif timing:
    @st.fragment(run_every=1.0)
    def wait_for_time():
        if not time_state(profile, stages)[0]:
            st.rerun(scope="app")  # done: redraw the table with time in it
        st.info("Timing the model for torchgpipe's balance_by_time in a child process…")
    wait_for_time()
else:
    missing = time_left_out(profile)  # a CUDA profile on a machine without a GPU
    if time_error and time_error != missing:
        st.warning(f"time: {time_error}")
    untrusted = not is_trusted(profile.model.spec) and is_user_spec(profile.model.spec)
    if missing is not None:
        st.info(f"time is left out: {missing}.")
    elif untrusted:  # data is data: a file's user model is never built (issue 12)
        st.warning("time: " + untrusted_note(
            profile.model.spec, f"python -m mcap recommend --method time --model "
                                f"{profile.model.spec} --profile FILE --stages {stages}"))
    elif st.button("⏱️ Time the model (torchgpipe balance_by_time)", key="rec-time",
                 help="the throughput baseline the paper compares with (4.3): times each layer "
                      "of the real model in a child process; a few seconds"):
        start_time(profile, stages)
        st.rerun()
table = fig_rec.comparison_table(tuple(rows), measured_runs(profile, sweep))
st.dataframe(table_view(table, ("predicted_peak", "measured_peak")), hide_index=True, key="rec-table",
             column_config={"search_seconds": st.column_config.NumberColumn(format="%.4f")})
downloads(table, "mcap-recommendations", "rec")

if rec is not None:
    st.subheader("Use it")
    if acc is not None and acc.warning():
        st.warning(acc.warning())
    chunks = profile.setup.chunks
    left, right = st.columns(2)
    left.markdown("**torchgpipe**")
    left.code(snippet.gpipe_snippet(profile.model, tuple(rec.balance), chunks), language="python")
    right.markdown("**torch.distributed.pipelining**")
    right.code(snippet.pipelining_snippet(profile.model, tuple(rec.balance), chunks), language="python")
