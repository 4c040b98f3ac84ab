"""Scaling: the largest model each partitioner trains under a memory capacity (paper 4.3,
Fig. 11) from a bundled ``*.scale.json`` (``python -m mcap scale ... --out``)."""
import streamlit as st

from mcap.io.datasets import datasets_dir
from mcap.core.errors import McapError
from mcap.core.scaling import reference
from mcap.figures import scaling as fig_scaling
from mcap.figures._style import fmt_bytes, method_label, table_view
from mcap.io.scalefile import compared_first, load
from pages._shared import chart, downloads, error, remember, restore_url, shared_choice

restore_url()
st.title("Scaling")
st.markdown(
    "How large a model trains when each device has a fixed capacity. For each partitioner the "
    "model is grown and the largest size whose partitioning trains is found by binary search; "
    "at each size the partitioner's pick is measured for real under the capacity. The paper "
    "reports **1.55x** more parameters for mCAP than for torchgpipe's throughput-balanced "
    "split (" + method_label(reference()) + ").")

files = [p.name for p in compared_first(datasets_dir().glob("*.scale.json"))]
if not files:
    st.info("No scaling result is bundled: run a scaling experiment from the command line (the "
            "Scaling section of the docs) and put its result beside the bundled data:")
    st.code("python -m mcap scale ... --out data/NAME.scale.json", language="bash")
    st.stop()
chosen = shared_choice("scale", files, files[0])  # another name is said once, not replaced silently
chosen = st.selectbox("Scaling result", files, index=files.index(chosen), key="scale-file")
remember("scale", chosen)


@st.cache_data(show_spinner=False)
def _load(path: str, mtime: float):
    return load(path)


path = datasets_dir() / chosen
try:
    result = _load(str(path), path.stat().st_mtime)
except McapError as exc:
    error(exc)
    st.stop()

s = result.setup
st.caption(f"{result.model} · vary {result.vary} over {result.grid[0]}..{result.grid[-1]} · "
           f"{s.stages} stages · capacity {fmt_bytes(s.capacity_bytes)} per stage · batch "
           f"{s.batch_size} in {s.chunks} micro-batches · {s.schedule}, checkpoint {s.checkpoint} · "
           f"{s.device}/{s.engine}")

REFERENCE = reference()  # the baseline the paper compares with (time: 1.55x)
if REFERENCE not in {r.partitioner for r in result.results}:
    st.info(f"This file scales {', '.join(r.partitioner for r in result.results)} only: it has "
            f"no run {method_label(REFERENCE)} to compare with the paper's 1.55x; choose a file "
            "that has one.")
summary = fig_scaling.scaling_summary(result)
# Two a row: four or five in a row cut "9.39M params" at 1280 px (issue 40, item 13)
cols = [col for _ in range(0, max(len(summary), 1), 2) for col in st.columns(2)]
for col, row in zip(cols, summary.itertuples()):
    if row.largest_params is None or str(row.largest_params) == "<NA>":
        col.metric(method_label(row.partitioner), "none trains")
        continue
    ratio = row.ratio_to_time
    delta = (None if ratio is None or ratio != ratio or row.partitioner == REFERENCE
             else f"{ratio:.2f}x {method_label(REFERENCE)}")
    col.metric(method_label(row.partitioner), f"{int(row.largest_params) / 1e6:.2f}M params", delta=delta,
               help=f"{result.vary}={row.largest_value}" + (" (highest tried)" if row.at_high else ""))

points = fig_scaling.scaling_points(result)
chart(fig_scaling.draw_scaling(points, s.capacity_bytes), key="scaling-chart", name="scaling")
st.dataframe(table_view(points, ("peak", "predicted_peak")), hide_index=True, key="scaling-table",
             column_config={"params": st.column_config.NumberColumn("params", format="%d")})
downloads(points, "mcap-scaling", "scaling")
noted = [(r.partitioner, p.value, p.error) for r in result.results for p in r.points
         if p.status == "ok" and p.error]  # e.g. picked from measurements, not predicted
for partitioner, value, note in noted:
    st.caption(f"{partitioner} at {result.vary}={value}: {note}")
