"""mcap dashboard entry: page config + st.navigation over pages/ (ARCHITECTURE.md, "Add a
page"). Start it with ``bash bin/dashboard`` (binds 127.0.0.1, see .streamlit/)."""
import streamlit as st

from mcap.core.errors import McapError
from pages._shared import error, navigation

st.set_page_config(page_title="mcap", page_icon="🧮", layout="wide")
page = navigation()
try:
    page.run()
except McapError as exc:  # a page that did not catch it: st.error all the same, no traceback
    error(exc)
