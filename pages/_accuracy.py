"""How good the predictions are on the data shown (mcap.core.accuracy), one place for every
page that shows predictions: Overview, Predict vs measure, Recommend, Present. Not a page."""
from __future__ import annotations

from typing import Optional

import streamlit as st

from mcap.core.accuracy import Accuracy, accuracy
from mcap.core.errors import McapError
from mcap.io import datasets
from pages._search import current_predictor
from pages._shared import mismatch_said, open_dataset, profile_param, revision_of, shared


@st.cache_data(show_spinner=False, max_entries=16)
def _accuracy(profile_ref: str, sweep_ref: str, predictor: str, revisions: tuple):
    return accuracy(open_dataset(profile_ref), open_dataset(sweep_ref), predictor)


def dataset_accuracy(profile, sweep) -> Optional[Accuracy]:
    """The chosen predictor's error on the chosen sweep, or None when there is no sweep of
    this profile's model and setup (or it has no ok run)."""
    if sweep is None:
        return None
    p, s = profile_param(), shared("sweep")
    try:
        if p is None or s is None:
            return accuracy(profile, sweep, current_predictor())
        refs = (datasets.parse_ref(p), datasets.parse_ref(s))
        return _accuracy(p, s, current_predictor(), tuple(revision_of(r) for r in refs))
    except McapError:
        return None


def show_accuracy(profile, sweep, container=st) -> Optional[Accuracy]:
    """A caption with the dataset's p50/p90 error, a warning above the goal (with the term it
    comes from where the data tells), or a caption saying it is not known here."""
    acc = dataset_accuracy(profile, sweep)
    if acc is None and mismatch_said():  # the mismatch caption said so, naming both
        return None
    if acc is None:
        container.caption("How far off these predictions are is not known here: no measured "
                          "sweep of this model and setup is open (choose one on the Overview page).")
        return None
    if acc.good:
        container.caption(acc.summary())
    else:
        container.warning(" ".join(x for x in (acc.warning(), acc.summary(), acc.term_sentence()) if x))
    return acc
