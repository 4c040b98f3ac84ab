"""What every page shares: shareable state in query params, the store, cached dataset
loading, errors as st.error, and chart/table export. Not a page (app.py does not list it).

The state, navigation, store and errors are in ``pages/_state.py``, the datasets (listing,
loading, the chosen one, a profile matched to a sweep) in ``pages/_datasets.py``; pages
import all of it from here.

Caching (ARCHITECTURE.md, Dashboard): ``st.cache_data`` only here in pages/, keyed on the store's or the
file's content revision (mtime and size), so a new run in the store shows up at once. What is
large and never changed (datasets, a sweep's predictions, Present's story) is cached with
``st.cache_resource`` under the same keys: the object itself, not a copy unpickled per call.
"""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from mcap.figures._style import EXPORT
from pages._datasets import (  # noqa: F401  (what pages import from here)
    DEFAULTS, EXAMPLES, add_upload, caption_of, choices, choose_profile, chosen_param, current,
    dataset_label, dataset_name, example_rank, matching_sweep, mismatch_said, open_dataset,
    press_profiles, profile_for, profile_param, revision_of, sweep_for,
)
from pages._state import (  # noqa: F401  (what pages import from here)
    PAGES, SHARED_KEYS, error, message, navigation, not_usable, open_store_or_raise,
    remember, restore_url, shared, shared_balance, shared_choice, shared_float, shared_int,
    store, store_revision,
)

PLOT_CONFIG = {"displaylogo": False, "toImageButtonOptions": dict(EXPORT)}


# --- showing things ----------------------------------------------------------------------

def chart(fig, key: str, name: str, **kwargs):
    """A plotly chart whose mode bar exports a PNG named after the figure."""
    config = {**PLOT_CONFIG, "toImageButtonOptions": {**EXPORT, "filename": f"mcap-{name}"}}
    return st.plotly_chart(fig, key=key, config=config, **kwargs)


def downloads(frame: pd.DataFrame, name: str, key: str) -> None:
    """CSV and JSON of a table that is shown, written when clicked (a deferred download):
    written on every rerun, the 3,654 points of a full sweep cost each click on the scatter
    their CSV and JSON."""
    left, right = st.columns(2)
    left.download_button("⬇️ CSV", lambda: frame.to_csv(index=False).encode(),
                         file_name=f"{name}.csv", mime="text/csv", key=f"{key}-csv")
    right.download_button("⬇️ JSON", lambda: frame.to_json(orient="records", indent=1).encode(),
                          file_name=f"{name}.json", mime="application/json", key=f"{key}-json")


def json_download(obj, name: str, key: str, label: str = "⬇️ JSON") -> None:
    st.download_button(label, json.dumps(obj, indent=1).encode(), file_name=f"{name}.json",
                       mime="application/json", key=key)
