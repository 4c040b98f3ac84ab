"""The teaching page's cached work ("Pipeline memory, explained"): the schedules' action lists
(a child process asks torch, ``mcap.io.orders``), the lesson drawn from them, the measured run
to put beside it, the bundled profile without checkpointing and the two splits the statistics
paragraph compares. Not a page; ``st.cache_data`` keyed on the dataset's content, so a warm
interaction costs no child process and no simulation (issue 40, targets: <= 1 s)."""
from __future__ import annotations

from dataclasses import replace
from typing import Optional

import streamlit as st

from mcap.core import schedules, search, teaching
from mcap.core.errors import McapError
from mcap.io import datasets, orders
from pages._search import measured_for, measured_runs
from pages._shared import choices, open_dataset, revision_of


def revision(param: str) -> tuple:
    return revision_of(datasets.parse_ref(param))


@st.cache_data(show_spinner=False, max_entries=64)
def action_lists(requests: tuple) -> dict:
    """(schedule, G, V, M) -> its ActionList, or the McapError saying why there is none."""
    return orders.answers(requests)


def requests_for(setup, stages: int, chunks: int, chosen: str, virtual: int) -> tuple:
    """Every schedule at (G, M), the chosen one at its V and the others at their default V,
    and the calibration list of the chosen one's stages: one child process for all."""
    out = []
    for name in schedules.names():
        spec = schedules.get(name)
        v = virtual if name == chosen else spec.virtual(None)
        out.append((name, stages, v, chunks))
    cal = teaching.calibration_request(setup, stages * virtual)
    others = {teaching.calibration_request(setup, stages * r[2]) for r in out} - {cal}
    return tuple(out) + tuple(sorted(others)) + (cal,)


@st.cache_data(show_spinner=False, max_entries=128)
def lesson(param: str, rev: tuple, predictor: str, balance: tuple, request: tuple,
           cal_request: tuple, run_key: tuple, _run, run_setup) -> teaching.Lesson:
    """The lesson of ``balance`` under ``request``'s action list (``run_key`` stands for the
    measured run in the cache key)."""
    profile = open_dataset(param)
    got = action_lists((request, cal_request))
    for r in (request, cal_request):
        if isinstance(got[r], McapError):
            raise got[r]
    return teaching.of_profile(profile, balance, got[request], got[cal_request], predictor,
                               _run, run_setup)


def measured(profile, sweep, balance: tuple, schedule: str, virtual: int, chunks: int):
    """The measured run to put beside the view and what it ran under: one of the schedule
    drawn (the store's study of that setup) when there is one, else the profile's setup's."""
    setup = profile.setup
    other = replace(setup, schedule=schedule, virtual_stages=virtual, chunks=chunks)
    if other != setup:
        run = measured_for(measured_runs(replace(profile, setup=other, runs=()), None), balance)
        if run is not None and run.status == "ok":
            return run, other
    if len(balance) != setup.num_chunks:
        return None, setup
    return measured_for(measured_runs(profile, sweep), balance), setup


def run_key(run) -> tuple:
    return () if run is None else (run.status, tuple(run.balance), tuple(run.peaks or ()))


@st.cache_data(show_spinner=False, max_entries=16)
def never_twin(param: str, rev: tuple) -> Optional[str]:
    """The bundled profile measured without checkpointing on the same pipeline as ``param``'s
    (``teaching.without_checkpointing``), as a dataset param, or None."""
    profile = open_dataset(param)
    if profile.setup.checkpoint == "never":
        return None
    refs, found = [], []
    for ref in choices("profile"):
        if ref.source != "bundled" or ref.param == param:
            continue
        try:
            found.append(open_dataset(ref.param))
            refs.append(ref)
        except McapError:
            continue
    i = teaching.without_checkpointing(profile, found)
    return None if i is None else refs[i].param


@st.cache_data(show_spinner=False, max_entries=16)
def splits(param: str, rev: tuple, predictor: str, stages: int) -> tuple:
    """(balance, predicted peaks) of the split by parameters and of mCAP's (the default
    search method) under ``predictor``."""
    from mcap.core.recommend import recommend
    profile = open_dataset(param)
    by_params = recommend(profile, stages, "params", predictor)
    by_memory = recommend(profile, stages, search.DEFAULT, predictor)
    return ((by_params.balance, by_params.predicted_peaks),
            (by_memory.balance, by_memory.predicted_peaks))
