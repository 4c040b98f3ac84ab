"""Searches for the dashboard: recommendations, the time baseline measured once per server
process, bo in background threads, and the measured runs a page compares with. Never
imports streamlit: pages/ cache these per dataset content and draw them.

Every number comes from the library's one entry, ``mcap.core.recommend.recommend``.
"""
from __future__ import annotations

import threading
import time
from typing import Optional, Sequence

import numpy as np

from mcap.core.errors import McapError
from mcap.core.recommend import context_of, costs_of, recommend
from mcap.core.search import get, names
from mcap.core.setup import mismatch, micro_batch
from mcap.core.types import Prediction, Profile, Recommendation, Sweep

TIME_PROFILING_S = 0.5  # balance_by_time's timing budget per layer pass (torchgpipe's timeout)
_TIME_BALANCES: dict = {}  # (spec, stages, micro-batch, timeout, device) -> balance
_TIME_LOCK = threading.Lock()


def quick_methods() -> tuple[str, ...]:
    """Methods a page may run while it renders (milliseconds): not the on-demand ones (bo)
    and not those that time the real model (``needs_model``: ``time``; a job, or the
    Recommend page's button)."""
    return names(on_demand=False, needs_model=False)


def timed_methods() -> tuple[str, ...]:
    """Methods that time the real model (``needs_model``: ``time``): timed in the server's
    timing child when a page asks, shown once done."""
    return names(needs_model=True)


def on_demand_methods() -> tuple[str, ...]:
    """Methods that take minutes (``on_demand``: ``bo``): run in a background thread when a
    page asks, their best-so-far curve polled as it grows."""
    return names(on_demand=True)


# bf predicts every partitioning: past this many it takes from seconds to many minutes
# (about 1 M/s on the project's loaded 2-core VM), too long for a table drawn on every rerun.
RENDER_PARTITIONINGS = 5 * 10 ** 6


def render_skip(method: str, num_layers: int, stages: int) -> Optional[str]:
    """Why a page should not run ``method`` just to fill a comparison table, or None: a
    method that predicts every partitioning (``enumerates``: bf) past RENDER_PARTITIONINGS."""
    from mcap.core.partition import count
    from mcap.core.search import DEFAULT
    if not get(method).enumerates or not 1 <= stages <= num_layers:
        return None
    n = count(num_layers, stages)
    if n <= RENDER_PARTITIONINGS:
        return None
    return (f"{method} is left out of this table: {n:,} partitionings of {num_layers} layers "
            f"on {stages} stages take minutes to predict one by one; {DEFAULT} finds the same "
            f"lowest peak. Choose Method {method} to run it anyway.")


def label(method: str) -> str:
    return get(method).label


def _child_timer(spec: str, stages: int, micro: int, device: str, timeout: float) -> tuple:
    """balance_by_time in the server's timing child (``mcap.app.timing``): the dashboard
    server never imports torch or builds a model itself."""
    from mcap.app.timing import time_balance_isolated
    return time_balance_isolated(spec, stages, micro, device=device, timeout=timeout)


def _cached_timer(device: str, timeout: float):
    """balance_by_time, once per (model, stages, micro-batch) per server process: a timing
    is noisy, so every page shows the same answer until the server restarts."""
    def cached(spec: str, stages: int, micro: int) -> tuple[int, ...]:
        key = (spec, int(stages), int(micro), float(timeout), device)
        with _TIME_LOCK:
            known = _TIME_BALANCES.get(key)
        if known is None:
            known = _child_timer(spec, stages, micro, device, timeout)
            with _TIME_LOCK:
                _TIME_BALANCES[key] = known
        return known
    return cached


def time_left_out(profile: Profile) -> Optional[str]:
    """Why this server cannot time the profile's model, or None: a CUDA profile on a
    machine without a GPU (``mcap.app.devices``, read without torch) is left out with the
    reason, never timed on the CPU instead (issue 30; ``python -m mcap evaluate`` says the
    same words)."""
    from mcap.app.devices import gpu_count
    from mcap.core.search.time import no_device_note
    if profile.setup.device == "cuda" and gpu_count() == 0:
        return no_device_note("cuda")
    return None


def time_known(profile: Profile, stages: int, timeout: float = TIME_PROFILING_S) -> bool:
    """Whether this server already timed the profile's model for ``stages``."""
    key = (profile.model.spec, int(stages), micro_batch(profile.setup), float(timeout),
           profile.setup.device)
    return key in _TIME_BALANCES


def run_method(profile: Profile, stages: int, method: str, predictor: Optional[str] = None,
               settings: Optional[dict] = None, progress=None) -> Recommendation:
    """One registered method as a Recommendation under ``predictor``."""
    settings = dict(settings or {})
    context = None
    if get(method).needs_model:
        missing = time_left_out(profile)
        if missing is not None:  # before any child process starts
            from mcap.core.search.time import NoDevice
            raise NoDevice(missing)
        timeout = float(settings.pop("timeout", TIME_PROFILING_S))
        context = context_of(profile, timer=_cached_timer(profile.setup.device, timeout))
    return recommend(profile, stages, method, predictor, context=context, progress=progress,
                     **settings)


_TIMING: dict = {}  # (dataset, stages) -> thread timing it now (the child does the work)
_TIME_ERRORS: dict = {}


def time_state(dataset: str, stages: int) -> tuple[bool, Optional[str]]:
    """(timing now, last error) of the time baseline for a dataset and stage count."""
    key = (dataset, int(stages))
    thread = _TIMING.get(key)
    return (thread is not None and thread.is_alive()), _TIME_ERRORS.get(key)


def start_time(dataset: str, profile: Profile, stages: int) -> None:
    """Time the model in a background thread of this server (once at a time per key); the
    timing itself runs in the server's timing child (``mcap.app.timing``)."""
    key = (dataset, int(stages))
    with _TIME_LOCK:
        if key in _TIMING and _TIMING[key].is_alive():
            return
        _TIME_ERRORS.pop(key, None)
        missing = time_left_out(profile)
        if missing is not None:  # nothing to start: the page shows why
            _TIME_ERRORS[key] = missing
            return

        def work():
            try:
                run_method(profile, stages, timed_methods()[0])
            except McapError as exc:
                _TIME_ERRORS[key] = str(exc)
            except Exception as exc:  # shown on the page, never a traceback
                _TIME_ERRORS[key] = f"timing failed: {type(exc).__name__}: {exc}"
        _TIMING[key] = threading.Thread(target=work, daemon=True, name="mcap-time")
        _TIMING[key].start()


class BoRun:
    """One on-demand search (``on_demand``: bo) in a background thread of this server, so
    the page stays responsive and the best-so-far curve can be polled while it grows.
    Seeded, so a finished run is reused by any session. ``method``: the first on-demand
    method unless told."""

    def __init__(self, profile: Profile, stages: int, seed: int, iterations: int,
                 predictor: Optional[str] = None, method: Optional[str] = None):
        self.method = method or on_demand_methods()[0]
        self.iterations = iterations
        self.curve: list[int] = []
        self.result: Optional[Recommendation] = None
        self.error: Optional[str] = None
        self.started = time.monotonic()
        self.ended: Optional[float] = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="mcap-bo",
                                       args=(profile, stages, seed, iterations, predictor))
        self.thread.start()

    def _run(self, profile, stages, seed, iterations, predictor):
        try:
            self.result = recommend(profile, stages, self.method, predictor, seed=seed,
                                    iterations=iterations, on_best=self._on_best)
        except _Stopped:
            self.error = (f"{self.method} was stopped after {len(self.curve)} of {iterations} "
                          "evaluations")
        except McapError as exc:
            self.error = str(exc)
        except Exception as exc:  # shown on the page, never a traceback
            self.error = f"{self.method} failed: {type(exc).__name__}: {exc}"
        finally:
            self.ended = time.monotonic()

    def _on_best(self, n, best) -> None:
        if self._stop.is_set():
            raise _Stopped()
        self.curve.append(best)

    def stop(self) -> None:
        """Ask the search to stop at its next evaluation (the curve so far is kept)."""
        self._stop.set()

    @property
    def elapsed(self) -> float:
        return (self.ended or time.monotonic()) - self.started

    @property
    def rate(self) -> float:
        """Evaluations per second so far."""
        return len(self.curve) / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def finished(self) -> bool:
        return self.result is not None or self.error is not None


class _Stopped(Exception):
    """Raised inside bo's callback to end a search the user stopped."""


# bo runs of this server process, by (dataset, stages, seed, iterations, predictor). A
# module global, so a run outlives page reruns, cache clears and sessions.
_BO_RUNS: dict = {}
_BO_LOCK = threading.Lock()


def bo_run(dataset: str, profile: Profile, stages: int, seed: int, iterations: int,
           predictor: Optional[str] = None, start: bool = False,
           method: Optional[str] = None) -> Optional[BoRun]:
    """The on-demand run (``method``: the first on-demand method, bo, unless told) for this
    dataset and settings: existing, started now (once, even when two sessions press the
    button together), or None."""
    method = method or on_demand_methods()[0]
    key = (dataset, int(stages), int(seed), int(iterations), predictor, method)
    with _BO_LOCK:
        if key not in _BO_RUNS and start:
            _BO_RUNS[key] = BoRun(profile, int(stages), int(seed), int(iterations), predictor,
                                  method)
        return _BO_RUNS.get(key)


def finished_bo(dataset: str, stages: int, predictor: Optional[str] = None,
                method: Optional[str] = None) -> Optional[Recommendation]:
    """The latest finished pick of an on-demand method (bo unless told) for a dataset and
    stage count, if any session ran one."""
    method = method or on_demand_methods()[0]
    with _BO_LOCK:
        done = [run.result for key, run in _BO_RUNS.items()
                if key[0] == dataset and key[1] == int(stages) and key[4] == predictor
                and key[5] == method and run.result is not None]
    return done[-1] if done else None


def sweep_predictions(profile: Profile, sweep: Sweep,
                      predictor: Optional[str] = None) -> tuple[Prediction, ...]:
    """The predicted per-stage peaks of every partitioning a sweep measured."""
    why = mismatch(profile, sweep)
    if why:
        raise McapError(why)
    balances = [tuple(r.balance) for r in sweep.runs]
    if not balances:
        return ()
    costs = costs_of(profile, predictor)
    out = []
    for g in sorted({len(b) for b in balances}):
        rows = [b for b in balances if len(b) == g]
        peaks = costs.peaks_many(np.asarray(rows, dtype=np.int64))
        out += [Prediction(b, tuple(int(x) for x in row)) for b, row in zip(rows, peaks)]
    order = {b: i for i, b in enumerate(balances)}
    return tuple(sorted(out, key=lambda p: order[p.balance]))


def measured_runs(profile: Profile, sweep: Optional[Sweep] = None, store=None) -> tuple:
    """Every measured run of the profile's model and setup that we know of: the profile's
    own, the sweep's (same model and setup), and the store's for that study. A merged
    profile's runs are stored in the real model's study (``Store.save_profile``): those
    whose stage boundaries fall between merged layers are given over the merged layers."""
    from mcap.core.capture import merging
    runs = list(profile.runs)
    if sweep is not None and mismatch(profile, sweep) is None:
        runs += list(sweep.runs)
    if store is not None:
        study = store.find_study(profile.model.spec, profile.setup)
        if study is not None:  # a merged profile's runs were copied here before
            runs += list(store.runs(study))
        sizes = merging.sizes_of(profile)
        real = None if sizes is None else \
            store.find_study(merging.real_spec(profile), profile.setup)
        if real is not None:
            runs += [r for r in (merging.contract_run(x, sizes) for x in store.runs(real))
                     if r is not None]
    return tuple(runs)


def measured_for(runs: Sequence, balance):
    """The last ok (else last) run of a balance among ``runs``, or None."""
    mine = [r for r in runs if tuple(r.balance) == tuple(balance)]
    ok = [r for r in mine if r.status == "ok"]
    return (ok or mine or [None])[-1]
