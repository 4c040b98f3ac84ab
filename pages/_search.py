"""Predictions and recommendations for the pages: cached per dataset content, bo in a
background thread, the time baseline measured once per server process. Every number
comes from mcap/ (predict, search, timebalance); this only caches and schedules."""
from __future__ import annotations

from typing import Optional

import streamlit as st

from mcap.io import datasets
from mcap.core.errors import McapError
from pages._shared import open_dataset, revision_of, shared, store


# --- predictions and recommendations (every number from mcap/) ---------------------------

METHODS = ("exact", "bf", "bo")
BASELINES = ("balance_by_time", "uniform", "params")
TIME_PROFILING_S = 0.5  # balance_by_time's timing budget per layer pass (torchgpipe's timeout)
_TIME_BALANCES: dict = {}  # (spec, stages, micro-batch, timeout) -> (balance, seconds)


def uniform_balance(num_layers: int, stages: int) -> tuple[int, ...]:
    """Where the widgets start before anything is chosen (mcap.core.search.baselines.uniform)."""
    from mcap.core.search.baselines import uniform
    return tuple(uniform(num_layers, stages))


@st.cache_data(show_spinner=False, max_entries=64)
def _recommend(param: str, revision: tuple, stages: int, method: str, settings: tuple):
    profile = open_dataset(param)
    return run_method(profile, stages, method, dict(settings))


def run_method(profile, stages: int, method: str, settings: dict, progress=None):
    """One method or baseline as a Recommendation (the search's one result type)."""
    if method == "balance_by_time":
        import time as _time
        from mcap.core.predict import predict
        from mcap.runner.timebalance import time_balance_isolated as time_balance  # a child
        from mcap.core.types import Recommendation
        setup = profile.setup
        key = (profile.model.spec, int(stages), max(setup.batch_size // setup.chunks, 1),
               float(settings.get("timeout", TIME_PROFILING_S)))
        if key not in _TIME_BALANCES:  # a timing, so noisy: one answer per server process
            started = _time.perf_counter()
            balance = time_balance(key[0], key[1], key[2], timeout=key[3])
            _TIME_BALANCES[key] = (balance, _time.perf_counter() - started)
        balance, seconds = _TIME_BALANCES[key]
        pred = predict(profile.stats, balance)
        return Recommendation("balance_by_time", pred.balance, pred.peaks, seconds, 1)
    from mcap.core.search import recommend
    return recommend(profile.stats, stages, method, progress=progress,
                     layer_params=[layer.param_bytes for layer in profile.model.layers], **settings)


def recommendation(profile, stages: int, method: str, **settings):
    """Cached per dataset content, stage count, method and settings."""
    param = shared("profile")
    if param is None:
        return run_method(profile, stages, method, settings)
    return _recommend(param, revision_of(datasets.parse_ref(param)), int(stages), method,
                      tuple(sorted(settings.items())))


def recommendations(profile, stages: int, methods) -> tuple:
    return tuple(recommendation(profile, stages, m) for m in methods)


class BoRun:
    """One bo search running in a background thread of this server, so the page stays
    responsive and the best-so-far curve can be polled while it grows (bo takes minutes on
    a small CPU machine; BENCHMARKS.md). Seeded, so a finished run is reused by any session."""

    def __init__(self, profile, stages: int, seed: int, iterations: int):
        import threading
        self.iterations = iterations
        self.curve: list[int] = []
        self.result = None
        self.error: Optional[str] = None
        self.thread = threading.Thread(target=self._run, args=(profile, stages, seed, iterations),
                                       daemon=True, name="mcap-bo")
        self.thread.start()

    def _run(self, profile, stages, seed, iterations):
        from mcap.figures.recommend import live_bo
        try:
            self.result = live_bo(profile.stats, stages, seed=seed, iterations=iterations,
                                  on_best=lambda n, best: self.curve.append(best))
        except McapError as exc:
            self.error = str(exc)
        except Exception as exc:  # shown on the page, never a traceback
            self.error = f"bo failed: {type(exc).__name__}: {exc}"

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None


# bo runs of this server process, by (dataset, stages, seed, iterations). A module global,
# not st.cache_resource, so a run outlives cache clears (and AppTest's per-run caches).
_BO_RUNS: dict = {}


def _bo_runs() -> dict:
    return _BO_RUNS


def finished_bo(stages: int):
    """The latest finished bo Recommendation for the current profile and stage count, if
    any session of this server ran one (the Partition space page shows it, never starts it)."""
    param = shared("profile")
    done = [run.result for key, run in _BO_RUNS.items()
            if key[0] == param and key[1] == int(stages) and run.result is not None]
    return done[-1] if done else None


def bo_run(profile, stages: int, seed: int, iterations: int, start: bool = False) -> Optional[BoRun]:
    """The bo run for this dataset and these settings: existing, started now, or None."""
    key = (shared("profile"), int(stages), int(seed), int(iterations))
    runs = _bo_runs()
    if key not in runs and start:
        runs[key] = BoRun(profile, int(stages), int(seed), int(iterations))
    return runs.get(key)


def prediction_of(rec):
    from mcap.core.types import Prediction
    return Prediction(tuple(rec.balance), tuple(rec.predicted_peaks))


@st.cache_data(show_spinner=False, max_entries=16)
def _sweep_predictions(profile_param: str, sweep_param: str, revisions: tuple):
    """mCAP's prediction for every partitioning a sweep measured (vectorised Listing 1.1)."""
    from mcap.core.predict import predict_many
    from mcap.core.types import Prediction
    profile, sweep = open_dataset(profile_param), open_dataset(sweep_param)
    balances = [tuple(r.balance) for r in sweep.runs]
    if not balances:
        return ()
    peaks = predict_many(profile.stats, balances)
    return tuple(Prediction(b, tuple(int(x) for x in row)) for b, row in zip(balances, peaks))


def sweep_predictions(profile, sweep) -> tuple:
    if sweep.model.layers != profile.model.layers:
        raise McapError(f"the sweep's model {sweep.model.spec!r} ({sweep.model.num_layers} layers) "
                        f"is not the profile's {profile.model.spec!r} ({profile.model.num_layers} layers)")
    p, s = shared("profile"), shared("sweep")
    refs = (datasets.parse_ref(p), datasets.parse_ref(s))
    return _sweep_predictions(p, s, tuple(revision_of(r) for r in refs))


def measured_runs(profile, sweep=None) -> tuple:
    """Every measured run of the profile's model and setup that we know of: the profile's
    own, the sweep's (same model and setup), and the store's for that study."""
    runs = list(profile.runs)
    if sweep is not None and sweep.model.layers == profile.model.layers and sweep.setup == profile.setup:
        runs += list(sweep.runs)
    s = store()
    if s is not None:
        study = s.find_study(profile.model.spec, profile.setup)
        if study is not None:
            runs += list(s.runs(study))
    return tuple(runs)


def measured_for(runs, balance):
    """The last ok (else last) run of a balance among ``runs``, or None."""
    mine = [r for r in runs if tuple(r.balance) == tuple(balance)]
    ok = [r for r in mine if r.status == "ok"]
    return (ok or mine or [None])[-1]
