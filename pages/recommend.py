"""Recommend: run a search method (exact, bf, bo; paper 3.4) with its settings, watch bo's
best-so-far curve, compare every method and baseline, and copy a ready snippet."""
import time

import streamlit as st

from mcap.errors import McapError
from mcap.figures import recommend as fig_rec
from mcap.figures import snippet
from mcap.figures._style import balance_str, fmt_bytes
from pages._shared import (
    BASELINES, METHODS, caption_of, chart, current, downloads, measured_runs, recommendation,
    remember, restore_url, shared, shared_int,
)

restore_url()
st.title("🧭 Recommend")
profile = current("profile")
sweep = current("sweep", required=False)
st.caption(caption_of(profile))
layers = profile.model.num_layers

a, b, c = st.columns(3)
method = shared("method", "exact")
method = a.selectbox("Method", METHODS, index=METHODS.index(method) if method in METHODS else 0,
                     key="rec-method",
                     help="exact: min-max dynamic programme over prefix sums; bf: brute force over "
                          "all C(L-1, G-1) partitionings (mCAP-BF); bo: Bayesian optimisation "
                          "with scikit-optimize (mCAP-BO)")
stages = int(b.number_input("Stages", 1, layers, value=shared_int("stages", profile.setup.stages, 1, layers),
                            key="rec-stages"))
tolerance = c.number_input("Tie tolerance (MiB)", 0.0, 10_000.0, value=0.0, step=1.0, key="rec-tol",
                           help="peaks within this much of the lowest count as tied; ties are broken "
                                "by dropping the fullest device and comparing the rest (paper 3.4)")
remember("method", method)
remember("stages", stages)
settings = {"tie_tolerance": int(tolerance * 2**20)}
if method == "bo":
    a, b = st.columns(2)
    settings["iterations"] = int(a.number_input("bo iterations", 5, 500, value=75, key="rec-iters",
                                                help="the paper uses 75 (section 4.1)"))
    settings["seed"] = int(b.number_input("seed", 0, 10**6, value=0, key="rec-seed"))

if st.button(f"🔎 Run {method}", type="primary", key="rec-run"):
    placeholder = st.empty()
    curve: list[int] = []
    last_draw = [0.0]

    def progress(evaluated: int, best_peak: int) -> None:
        """bo's callback: redraw the best-so-far curve at most ~5 times a second."""
        curve.append(int(best_peak))
        if time.monotonic() - last_draw[0] > 0.2:
            last_draw[0] = time.monotonic()
            placeholder.plotly_chart(fig_rec.draw_curve(fig_rec.curve_frame(tuple(curve))),
                                     key=f"bo-live-{len(curve)}")

    try:
        with st.spinner(f"{method} is searching {stages} stages…"):
            rec = recommendation(profile, stages, method, progress=progress if method == "bo" else None,
                                 **settings)
        st.session_state["rec-last"] = rec
        placeholder.empty()
    except McapError as exc:
        st.error(str(exc))

rec = st.session_state.get("rec-last")
if rec is None or rec.method != method or len(rec.balance) != stages:
    try:
        rec = recommendation(profile, stages, method, **settings) if method != "bo" else rec
    except McapError as exc:
        st.error(str(exc))
        st.stop()
if rec is not None and (rec.method != method or len(rec.balance) != stages):
    rec = None

if rec is None:
    st.info(f"Press **Run {method}** to start the Bayesian optimisation; its best-so-far curve "
            "is drawn as it runs.")
else:
    remember("balance", ",".join(map(str, rec.balance)))
    c = st.columns(4)
    c[0].metric("recommended", balance_str(rec.balance))
    c[1].metric("predicted peak", fmt_bytes(rec.predicted_peak))
    c[2].metric("search time", f"{rec.seconds:.3f} s")
    c[3].metric("partitionings evaluated", f"{rec.evaluated:,}")
    if rec.curve:
        exact = recommendation(profile, stages, "exact", tie_tolerance=settings["tie_tolerance"])
        chart(fig_rec.draw_curve(fig_rec.curve_frame(rec.curve), optimum=exact.predicted_peak),
              key="rec-curve", name="bo-curve")

st.subheader("All methods and baselines")
rows = []
for name in METHODS + BASELINES:
    if name == method and rec is not None:
        rows.append(rec)
        continue
    if name == "bo":
        continue  # bo only when asked for: it takes seconds, not milliseconds
    try:
        rows.append(recommendation(profile, stages, name))
    except McapError as exc:
        st.warning(f"{name}: {exc}")
table = fig_rec.comparison_table(tuple(rows), measured_runs(profile, sweep))
st.dataframe(table, hide_index=True, key="rec-table",
             column_config={"search_seconds": st.column_config.NumberColumn(format="%.4f")})
downloads(table, "mcap-recommendations", "rec")

if rec is not None:
    st.subheader("Use it")
    chunks = profile.setup.chunks
    left, right = st.columns(2)
    left.markdown("**torchgpipe**")
    left.code(snippet.gpipe_snippet(profile.model, tuple(rec.balance), chunks), language="python")
    right.markdown("**torch.distributed.pipelining**")
    right.code(snippet.pipelining_snippet(profile.model, tuple(rec.balance), chunks), language="python")
