"""Recommendations for the pages, cached per dataset content: a thin layer over
``mcap.app.searches`` (which runs them) and the registries (which name them). Not a page."""
from __future__ import annotations

from typing import Optional

import streamlit as st

from mcap.app import searches
from mcap.core import predictors
from mcap.core.search import get, names
from mcap.io import datasets
from pages._shared import open_dataset, profile_param, remember, revision_of, shared, shared_choice, store



def methods() -> tuple[str, ...]:
    """Every registered search method, in registry order (read as a page renders, so one
    registered later is listed too)."""
    return names()


def quick() -> tuple[str, ...]:
    """What a page may run while it renders (``mcap.app.searches.quick_methods``)."""
    return searches.quick_methods()


def slow(method: str) -> bool:
    """Whether ``method`` is run elsewhere and shown once done: minutes of search
    (``on_demand``) or timing the real model (``needs_model``)."""
    return get(method).on_demand or get(method).needs_model


def partial(method: str) -> bool:
    """Whether ``method``'s rule exists for some models and stage counts only (Megatron-LM's
    divisibility, a block split of a model without blocks): its refusal is a note, not an
    error (``mcap.core.search.base.Method.partial``)."""
    return get(method).partial


def method_label(name: str) -> str:
    """The plain name a room reads (``mcap.figures._style.method_label``)."""
    from mcap.figures._style import method_label as label
    return label(name)


def predictor_choice(container=st, key: str = "predictor") -> str:
    """The predictor selector every prediction page shows, kept in the URL (``predictor``)."""
    options = predictors.names()
    current = shared_choice("predictor", options, predictors.DEFAULT)
    index = options.index(current)
    chosen = container.selectbox(
        "Predictor", options, index=index, key=key,
        format_func=lambda n: predictors.get(n).label + (" · default" if n == predictors.DEFAULT else ""),
        help=" ".join(f"**{n}**: {predictors.get(n).help}" for n in options))
    remember("predictor", chosen)
    return chosen


def current_predictor() -> str:
    name = shared("predictor", predictors.DEFAULT)
    return name if name in predictors.names() else predictors.DEFAULT


def uniform_balance(num_layers: int, stages: int) -> tuple[int, ...]:
    """Where the widgets start before anything is chosen."""
    from mcap.core.search.uniform import uniform
    return tuple(uniform(num_layers, stages))


@st.cache_data(show_spinner=False, max_entries=64)
def _recommend(param: str, revision: tuple, stages: int, method: str, predictor: str,
               settings: tuple):
    profile = open_dataset(param)
    return searches.run_method(profile, stages, method, predictor, dict(settings))


def recommendation(profile, stages: int, method: str, **settings):
    """Cached per dataset content, stage count, method, predictor and settings."""
    predictor = current_predictor()
    param = profile_param()
    if param is None:
        return searches.run_method(profile, stages, method, predictor, settings)
    return _recommend(param, revision_of(datasets.parse_ref(param)), int(stages), method,
                      predictor, tuple(sorted(settings.items())))


def recommendations(profile, stages: int, methods) -> tuple:
    return tuple(recommendation(profile, stages, m) for m in methods)


# --- the time baseline: timed in a child process, on demand, shown when ready ------------

def time_pick(profile, stages: int):
    """``time``'s Recommendation if this server has timed the model, else None."""
    if not searches.time_known(profile, stages):
        return None
    return recommendation(profile, stages, searches.timed_methods()[0])


def time_left_out(profile) -> Optional[str]:
    """Why this server cannot time the profile's model (a CUDA profile, no GPU here), or None."""
    return searches.time_left_out(profile)


def time_state(profile, stages: int) -> tuple[bool, Optional[str]]:
    """(timing now, last error) of the time baseline for this dataset and stage count."""
    return searches.time_state(shared("profile"), stages)


def start_time(profile, stages: int) -> None:
    """Time the model in the background (the server's timing child does the work)."""
    searches.start_time(shared("profile"), profile, stages)


# --- bo, measured runs, predictions of a sweep --------------------------------------------

def bo_run(profile, stages: int, seed: int, iterations: int, start: bool = False,
           method: Optional[str] = None):
    """The background run of an on-demand method (bo) for these settings, or None."""
    return searches.bo_run(shared("profile"), profile, stages, seed, iterations,
                           current_predictor(), start=start, method=method)


def finished_bo(stages: int, method: Optional[str] = None):
    return searches.finished_bo(profile_param(), stages, current_predictor(), method=method)


def done_elsewhere(profile, stages: int, method: str):
    """(the pick or None, why not) of a ``slow`` method: an on-demand one once a page ran
    it, one that times the model once this server timed it (the Recommend page)."""
    if get(method).on_demand:
        return finished_bo(stages, method), (
            f"{method_label(method)} has not run for this profile and stage count yet: run it "
            "on the Recommend page and its pick appears here.")
    missing = time_left_out(profile)  # a CUDA profile on a machine without a GPU
    return time_pick(profile, stages), (
        f"{method_label(method)} is left out: {missing}." if missing else
        "The model has not been timed for this stage count: press **Time the model** on the "
        f"Recommend page and the pick of {method_label(method)} appears here.")


def prediction_of(rec):
    from mcap.core.types import Prediction
    return Prediction(tuple(rec.balance), tuple(rec.predicted_peaks))


@st.cache_resource(show_spinner=False, max_entries=16)  # a tuple nothing changes: no copy
def _sweep_predictions(profile_param: str, sweep_param: str, predictor: str, revisions: tuple):
    return searches.sweep_predictions(open_dataset(profile_param), open_dataset(sweep_param),
                                      predictor)


def sweep_predictions(profile, sweep) -> tuple:
    p, s = profile_param(), shared("sweep")
    if p is None or s is None:
        return searches.sweep_predictions(profile, sweep, current_predictor())
    refs = (datasets.parse_ref(p), datasets.parse_ref(s))
    return _sweep_predictions(p, s, current_predictor(), tuple(revision_of(r) for r in refs))


def stage_peaks(profile, balance) -> tuple:
    """The chosen predictor's per-stage peaks of one balance."""
    from mcap.core.recommend import costs_of
    return costs_of(profile, current_predictor()).peaks(balance)


def measured_runs(profile, sweep=None) -> tuple:
    return searches.measured_runs(profile, sweep, store())


measured_for = searches.measured_for
