"""mcap dashboard entry: page config + st.navigation over pages/ (ARCHITECTURE.md, "Add a
page"). Start it with ``bash bin/dashboard`` (binds 127.0.0.1, see .streamlit/)."""
import streamlit as st

from pages._shared import navigation

st.set_page_config(page_title="mcap", page_icon="🧮", layout="wide")
navigation().run()
