"""What every page shares: shareable state in query params, the store, cached dataset
loading, errors as st.error, and chart/table export. Not a page (app.py does not list it).

Caching (DESIGN.md): ``st.cache_data`` only here in pages/, keyed on the store's or the
file's content revision (mtime and size), so a new run in the store shows up at once.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Optional

import pandas as pd
import streamlit as st

from mcap import datasets
from mcap.errors import McapError
from mcap.types import Profile, Sweep

# The state a copied URL reopens (issue 5, Everywhere).
SHARED_KEYS = ("profile", "sweep", "stages", "method", "balance", "schedule")
PLOT_CONFIG = {"displaylogo": False,
               "toImageButtonOptions": {"format": "png", "scale": 2}}


# --- shareable state --------------------------------------------------------------------

def shared(name: str, default: Optional[str] = None) -> Optional[str]:
    """A shared value: the URL's query param first, else this session's last choice.

    Page switches drop the query string, so the value is kept in session state too and
    written back to the URL on every page (``remember``)."""
    if name in st.query_params:
        value = st.query_params[name]
        st.session_state.setdefault("_shared", {})[name] = value
        return value
    return st.session_state.get("_shared", {}).get(name, default)


def remember(name: str, value) -> None:
    """Put a shared value in the URL and the session (None removes it)."""
    keep = st.session_state.setdefault("_shared", {})
    if value is None:
        keep.pop(name, None)
        if name in st.query_params:
            del st.query_params[name]
        return
    text = str(value)
    keep[name] = text
    if st.query_params.get(name) != text:
        st.query_params[name] = text


def restore_url() -> None:
    """Every page calls this first: make sure app.py's navigation is in charge, then, after a
    page switch, put this session's shared values back into the URL."""
    _ensure_navigation()
    for name, value in st.session_state.get("_shared", {}).items():
        if name in SHARED_KEYS and st.query_params.get(name) != value:
            st.query_params[name] = value


def _ensure_navigation() -> None:
    """A fresh server that is first asked for a deep link (``/space``) while a ``pages/``
    folder exists runs that page file alone, in Streamlit's legacy multipage mode, until
    some session has run ``st.navigation`` (streamlit/runtime/pages_manager.py). The sidebar
    then lists bare file names. Leave that mode and rerun through app.py."""
    try:
        from streamlit.runtime.pages_manager import PagesManager
    except ImportError:  # a Streamlit without the legacy mode
        return
    global _RERUN_FOR_NAVIGATION
    if getattr(PagesManager, "uses_pages_directory", None):
        PagesManager.uses_pages_directory = False
        # Once per server process: that first run carries no widget events to lose.
        # (AppTest resets the flag before every run; rerunning each time would drop clicks.)
        if _RERUN_FOR_NAVIGATION:
            _RERUN_FOR_NAVIGATION = False
            st.rerun()


_RERUN_FOR_NAVIGATION = True


def shared_int(name: str, default: int, low: int, high: int) -> int:
    """An int query param clamped to [low, high]; junk falls back to the default."""
    try:
        value = int(shared(name, str(default)))
    except (TypeError, ValueError):
        return default
    return min(max(value, low), high)


def widget_default(key: str, shared_name: str, value) -> None:
    """Seed a widget's session value from shared state before it is drawn."""
    if key not in st.session_state:
        st.session_state[key] = value


# --- the store ---------------------------------------------------------------------------

@st.cache_resource(show_spinner=False)
def _open_store(path: str):
    from mcap.store import open_store
    return open_store(path)


def store():
    """The results store ($MCAP_STORE or ./.mcap/store.sqlite), opened once per server.
    None, with an error shown, when the file is not a usable store."""
    from mcap.store import default_store_path
    path = str(default_store_path())
    try:
        return _open_store(path)
    except McapError as exc:
        st.error(f"The results store cannot be used: {exc}")
        return None


def store_revision() -> tuple:
    from mcap.store import default_store_path
    return datasets.file_revision(default_store_path())


# --- datasets ----------------------------------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=32)
def _load(param: str, revision: tuple):
    """A bundled or stored dataset; ``revision`` keys the cache on its content."""
    return datasets.load(datasets.parse_ref(param), store())


@st.cache_data(show_spinner=False, max_entries=8)
def _load_upload(name: str, digest: str, _data: bytes):
    return datasets.load_upload(name, _data)


def revision_of(ref: datasets.DatasetRef) -> tuple:
    if ref.source == "bundled":
        return datasets.file_revision(datasets.datasets_dir() / ref.key)
    return store_revision()


def choices(kind: str) -> list[datasets.DatasetRef]:
    """Bundled files, then the store's, then this session's uploads, of one kind."""
    refs = [r for r in datasets.bundled() if r.kind == kind]
    s = store()
    if s is not None:
        refs += [r for r in datasets.in_store(s) if r.kind == kind]
    for name, (k, _) in st.session_state.get("_uploads", {}).items():
        if k == kind:
            refs.append(datasets.DatasetRef("upload", kind, name, f"{name} (uploaded)"))
    return refs


def add_upload(name: str, data: bytes):
    """Load an uploaded file; keep it for this session; return the dataset (or raise)."""
    dataset = _load_upload(name, hashlib.sha256(data).hexdigest(), data)
    kind = "profile" if isinstance(dataset, Profile) else "sweep"
    st.session_state.setdefault("_uploads", {})[name] = (kind, data)
    return kind, dataset


def open_dataset(param: str):
    """The dataset a ref names; raises McapError for bad or missing ones."""
    ref = datasets.parse_ref(param)
    if ref.source == "upload":
        kept = st.session_state.get("_uploads", {}).get(ref.key)
        if kept is None:
            raise McapError(f"uploaded file {ref.key!r} is not in this session; upload it again")
        return _load_upload(ref.key, hashlib.sha256(kept[1]).hexdigest(), kept[1])
    return _load(param, revision_of(ref))


def current(kind: str, required: bool = True):
    """The chosen profile or sweep (query param ``profile``/``sweep``, else the first
    bundled one). Shows st.error and stops the page when it cannot be opened."""
    refs = choices(kind)
    param = shared(kind, refs[0].param if refs else None)
    if param is None:
        if required:
            st.error(f"No {kind} to show: data/ has no *.{kind}.json and the store has none. "
                     f"Choose or upload one on the Overview page.")
            st.stop()
        return None
    try:
        data = open_dataset(param)
    except McapError as exc:
        st.error(f"Cannot open {kind} {param!r}: {exc}")
        if required:
            st.stop()
        return None
    if not isinstance(data, Profile if kind == "profile" else Sweep):
        st.error(f"{param!r} is not a {kind}.")
        if required:
            st.stop()
        return None
    remember(kind, param)
    return data


def caption_of(data) -> str:
    s = data.setup
    return (f"{data.model.spec} · {data.model.num_layers} layers · {s.stages} stages · batch "
            f"{s.batch_size} in {s.chunks} micro-batches · {s.schedule}, checkpoint "
            f"{s.checkpoint} · {s.backend}/{s.engine}")


# --- showing things ----------------------------------------------------------------------

def chart(fig, key: str, name: str, **kwargs):
    """A plotly chart whose mode bar exports a PNG named after the figure."""
    config = {**PLOT_CONFIG, "toImageButtonOptions": {**PLOT_CONFIG["toImageButtonOptions"],
                                                      "filename": f"mcap-{name}"}}
    return st.plotly_chart(fig, key=key, config=config, **kwargs)


def downloads(frame: pd.DataFrame, name: str, key: str) -> None:
    """CSV and JSON of a table that is shown."""
    left, right = st.columns(2)
    left.download_button("⬇️ CSV", frame.to_csv(index=False).encode(), file_name=f"{name}.csv",
                         mime="text/csv", key=f"{key}-csv")
    right.download_button("⬇️ JSON", frame.to_json(orient="records", indent=1).encode(),
                          file_name=f"{name}.json", mime="application/json", key=f"{key}-json")


def json_download(obj, name: str, key: str, label: str = "⬇️ JSON") -> None:
    st.download_button(label, json.dumps(obj, indent=1).encode(), file_name=f"{name}.json",
                       mime="application/json", key=key)


# --- predictions and recommendations (every number from mcap/) ---------------------------

METHODS = ("exact", "bf", "bo")
BASELINES = ("balance_by_time", "uniform", "params")
TIME_PROFILING_S = 0.5  # balance_by_time's timing budget per layer pass (torchgpipe's timeout)
_TIME_BALANCES: dict = {}  # (spec, stages, micro-batch, timeout) -> (balance, seconds)


def uniform_balance(num_layers: int, stages: int) -> tuple[int, ...]:
    """Where the widgets start before anything is chosen (mcap.search.baselines.uniform)."""
    from mcap.search.baselines import uniform
    return tuple(uniform(num_layers, stages))


@st.cache_data(show_spinner=False, max_entries=64)
def _recommend(param: str, revision: tuple, stages: int, method: str, settings: tuple):
    profile = open_dataset(param)
    return run_method(profile, stages, method, dict(settings))


def run_method(profile, stages: int, method: str, settings: dict, progress=None):
    """One method or baseline as a Recommendation (the search's one result type)."""
    if method == "balance_by_time":
        import time as _time
        from mcap.predict import predict
        from mcap.timebalance import time_balance
        from mcap.types import Recommendation
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
    from mcap.search import recommend
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
    from mcap.types import Prediction
    return Prediction(tuple(rec.balance), tuple(rec.predicted_peaks))


@st.cache_data(show_spinner=False, max_entries=16)
def _sweep_predictions(profile_param: str, sweep_param: str, revisions: tuple):
    """mCAP's prediction for every partitioning a sweep measured (vectorised Listing 1.1)."""
    from mcap.predict import predict_many
    from mcap.types import Prediction
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


# --- jobs (child processes; DESIGN.md: never in the script thread) -------------------------

def setup_args(spec: str, setup) -> list[str]:
    """The CLI flags that reproduce a model spec and a Setup (``mcap.cli_profile``):
    ``--backend`` there is the engine, ``--device`` the device kind (Setup.backend)."""
    args = ["--model", spec, "--stages", str(setup.stages), "--batch-size", str(setup.batch_size),
            "--chunks", str(setup.chunks), "--schedule", setup.schedule,
            "--checkpoint", setup.checkpoint, "--optimizer", setup.optimizer,
            "--backend", setup.engine, "--device", setup.backend]
    if setup.capacity_bytes:
        args += ["--capacity", str(setup.capacity_bytes)]
    return args


def measure_args(profile, balance) -> list[str]:
    """``measure --model SPEC ... --balance 3,3,5,19`` under the profile's own setup, so the
    run lands in the profile's study and shows up as its measured peak."""
    return [*setup_args(profile.model.spec, profile.setup), "--balance", ",".join(map(str, balance))]


def job_output(kind: str) -> str:
    """Where a dashboard job writes its JSON: next to the store, named by kind and time."""
    import time
    from mcap.store import default_store_path
    out = Path(default_store_path()).parent / "out"
    return str(out / f"{kind}-{time.strftime('%Y%m%d-%H%M%S')}.{kind}.json")


def job_panel(s, job_id: int, key: str, every: float = 1.0) -> None:
    """Live progress of a job, polled from the store: runs done of total, current balance,
    the growing table of per-run peaks, a cancel button. Survives page switches because
    the job is a child process and its state lives in the store."""
    from mcap import jobs
    from mcap.figures.progress import runs_table
    try:
        finished = s.job(job_id).finished
    except McapError as exc:
        st.error(str(exc))
        return

    @st.fragment(run_every=None if finished else every)
    def panel():
        p = jobs.progress(s, job_id)
        job = p.job
        now = balance_label(job.current) if job.current else "-"
        total = job.total or "?"
        st.progress(p.fraction, text=f"{job.kind} job {job.id}: **{job.status}** · {job.done} of "
                                     f"{total} runs · now measuring {now}")
        if p.runs:
            st.dataframe(runs_table(p.runs), hide_index=True, key=f"{key}-runs-{job.id}")
        if not job.finished:
            if st.button("⏹️ Cancel", key=f"{key}-cancel-{job.id}"):
                jobs.cancel(s, job.id)
                st.rerun(scope="app")
        elif not finished:  # it finished since the page was drawn: redraw with the new runs
            st.rerun(scope="app")
        if job.status == "failed":
            st.error(f"Job {job.id} failed: {job.error}")
        elif job.status == "cancelled":
            st.warning(f"Job {job.id} was cancelled; the runs it finished are kept in the store.")
        elif job.status == "done":
            st.success(f"Job {job.id} is done; its results are in the store"
                       + (f" ({len(p.runs)} runs measured now)." if p.runs else "."))
    panel()


def balance_label(balance) -> str:
    return "-".join(str(int(n)) for n in balance)
