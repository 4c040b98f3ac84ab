"""mcap dashboard entry: page config + st.navigation over pages/ (DESIGN.md, Dashboard
conventions). Start it with ``bash bin/dashboard`` (binds 127.0.0.1, see .streamlit/)."""
import streamlit as st

st.set_page_config(page_title="mcap", page_icon="🧮", layout="wide")

# Emoji icons: Material icons would fetch a font from the internet (unreachable offline).
PAGES = [
    st.Page("pages/overview.py", title="Overview", icon="🏠", default=True),  # served at /
    st.Page("pages/profile.py", title="Profile", icon="⏱️", url_path="profile"),
    st.Page("pages/layers.py", title="Layers", icon="🧱", url_path="layers"),
    st.Page("pages/predict.py", title="Predict vs measure", icon="🎯", url_path="predict"),
    st.Page("pages/space.py", title="Partition space", icon="🗺️", url_path="space"),
    st.Page("pages/recommend.py", title="Recommend", icon="🧭", url_path="recommend"),
    st.Page("pages/scaling.py", title="Scaling", icon="📈", url_path="scaling"),
    st.Page("pages/explained.py", title="Pipeline memory, explained", icon="🎓",
            url_path="explained"),
]

st.navigation(PAGES).run()
