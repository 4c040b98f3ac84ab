"""Layers: mCAP's per-layer statistics (paper 3.1) with parameter bytes, and where the
profiling runs recorded it, the breakdown of each stage's peak."""
import streamlit as st

from mcap.core.errors import McapError
from mcap.figures import layers as fig_layers
from mcap.figures._style import fmt_bytes, table_view
from pages._shared import caption_of, chart, current, dataset_name, downloads, error, restore_url

restore_url()
st.title("Layers")
profile = current("profile")
st.caption(caption_of(profile))
st.markdown(
    "**mem_isolated(l)**: the peak of a device holding only layer *l*. "
    "**mem_added(l)**: how much a device's peak changes when layer *l* is appended to the "
    "layers before it on that device; it can be negative or near zero when recomputation "
    "discards the previous layer's activations (paper 3.2). Layer 0 has no mem_added.")

try:
    table = fig_layers.layer_table(profile.model, profile.stats)
except McapError as exc:
    error(exc)
    st.stop()

big = table.loc[table["mem_isolated"].idxmax()]
c1, c2, c3 = st.columns(3)
c1.metric("layers", len(table))
c2.metric("parameters", fmt_bytes(int(table["param_bytes"].sum())))
c3.metric("largest mem_isolated", fmt_bytes(int(big["mem_isolated"])), help=f"layer {big['layer']} ({big['name']})")
chart(fig_layers.draw_layers(table, dataset_name("profile")), key="layers-chart", name="layers")
st.dataframe(table_view(table, ("mem_isolated", "mem_added")), hide_index=True, key="layers-table",
             column_config={"param_bytes": st.column_config.NumberColumn("param_bytes", format="%d")})
downloads(table, "mcap-layers", "layers")

st.subheader("Breakdown of the profiling runs' peaks")
breakdown = fig_layers.breakdown_table(profile.runs)
if breakdown.empty:
    st.info("The runs of this profile did not record a breakdown into weights, gradients, "
            "optimizer state and activations.")
else:
    st.caption("At the moment of each stage's peak: weights, gradients, optimizer state, and "
               "the rest (activations, communication buffers, workspaces).")
    chart(fig_layers.draw_breakdown(breakdown, dataset_name("profile")), key="breakdown-chart", name="breakdown")
    st.dataframe(table_view(breakdown, ("weights", "gradients", "optimizer", "other", "peak")),
                 hide_index=True, key="breakdown-table")
    downloads(breakdown, "mcap-breakdown", "breakdown")
