"""mcap dashboard entry: page config + st.navigation over pages/."""
import streamlit as st

st.set_page_config(page_title="mcap", page_icon="🧮", layout="wide")

PAGES = [
    st.Page("pages/overview.py", title="Overview", icon="🏠", default=True),
]

st.navigation(PAGES).run()
