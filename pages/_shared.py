"""What every page shares: shareable state in query params, the store, cached dataset
loading, errors as st.error, and chart/table export. Not a page (app.py does not list it).

Caching (ARCHITECTURE.md, Dashboard): ``st.cache_data`` only here in pages/, keyed on the store's or the
file's content revision (mtime and size), so a new run in the store shows up at once.
"""
from __future__ import annotations

import hashlib
import json
from typing import Optional

import pandas as pd
import streamlit as st

from mcap.io import datasets
from mcap.core.setup import mismatch
from mcap.core.errors import McapError
from mcap.core.types import Profile, Sweep
from mcap.figures._style import EXPORT

# The state a copied URL reopens (issue 5, Everywhere).
SHARED_KEYS = ("profile", "sweep", "stages", "method", "predictor", "seed", "balance", "schedule",
               "scale", "mesh", "plan", "chunks", "capacity", "plan_capacity", "planner",
               "plan_device", "iterations", "estimates")
PLOT_CONFIG = {"displaylogo": False, "toImageButtonOptions": dict(EXPORT)}
# What a fresh visit opens: the bundled profile and the full sweep of the same model and
# setup, so every method's pick is a measured point of the Partition space (a sampled
# sweep leaves picks unmeasured: no rank, no star).
DEFAULTS = {"profile": "bundled:vgg11-h512-b8-cpu4.profile.json",
            "sweep": "bundled:vgg11-h512-b8-cpu4-full.sweep.json"}
# The pickers list the default first, then the second example: real GPT-2 blocks from
# transformers (hf:gpt2, 12 blocks, seq 256; issue 29), then the rest by name.
EXAMPLES = {kind: (DEFAULTS[kind], ref) for kind, ref in (
    ("profile", "bundled:gpt2-l12-h256-s256-cpu4.profile.json"),
    ("sweep", "bundled:gpt2-l12-h256-s256-cpu4-full.sweep.json"))}


def example_rank(kind: str, ref: datasets.DatasetRef) -> int:
    order = EXAMPLES.get(kind, ())
    return order.index(ref.param) if ref.param in order else len(order)


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


# The pages, in menu order (app.py runs them through st.navigation). Emoji icons: Material
# icons make the browser fetch SVGs from fonts.gstatic.com, unreachable offline. Without
# an emoji font they draw as boxes: bin/test installs fonts-noto-color-emoji for chromium.
PAGES = (
    ("pages/overview.py", "Overview", "🏠", None),  # the default page, served at /
    ("pages/profile.py", "Profile", "⏱️", "profile"),
    ("pages/layers.py", "Layers", "🧱", "layers"),
    ("pages/predict.py", "Predict vs measure", "🎯", "predict"),
    ("pages/space.py", "Partition space", "🗺️", "space"),
    ("pages/recommend.py", "Recommend", "🧭", "recommend"),
    ("pages/hybrid.py", "Hybrid plans", "🧩", "hybrid"),
    ("pages/scaling.py", "Scaling", "📈", "scaling"),
    ("pages/savers.py", "Memory savers", "🗜️", "savers"),
    ("pages/explained.py", "Pipeline memory, explained", "🎓", "explained"),
    ("pages/present.py", "Present", "📊", "present"),
)
_VIA_APP = "_mcap_navigation"


def navigation(position: str = "sidebar"):
    """app.py's st.navigation over :data:`PAGES`; marks the session as run through it."""
    st.session_state[_VIA_APP] = True
    pages = [st.Page(path, title=title, icon=icon, url_path=url) if url else
             st.Page(path, title=title, icon=icon, default=True)
             for path, title, icon, url in PAGES]
    return st.navigation(pages, position=position)


def restore_url() -> None:
    """Every page calls this first: make sure app.py's navigation is in charge, then, after a
    page switch, put this session's shared values back into the URL.

    A fresh server whose first request is a deep link (``/space``) while a ``pages/`` folder
    exists runs that page file alone, in Streamlit's legacy multipage mode, until some
    session calls ``st.navigation`` (which, as documented, turns that mode off). A session
    that did not come through app.py calls it here, hidden, and reruns through app.py; the
    page hash depends only on the URL path, so the same page comes back."""
    if not st.session_state.get(_VIA_APP):
        navigation(position="hidden")
        st.rerun()
    st.session_state.pop(_PAGE_PROFILE, None)  # a page-only profile (profile_for) ends here
    for name, value in st.session_state.get("_shared", {}).items():
        if name in SHARED_KEYS and st.query_params.get(name) != value:
            st.query_params[name] = value


def not_usable(name: str, raw, expected: str, used) -> None:
    """Say once per session that the link's ``name=raw`` could not be used, and what is
    shown instead (issue 28: ``?stages=-1`` was replaced by the default silently)."""
    said = st.session_state.setdefault("_said_bad_values", set())
    key = (name, str(raw))
    if key in said:
        return
    said.add(key)
    text = str(raw)
    shown = text if len(text) <= 40 else text[:37] + "..."
    st.warning(f"The link's {name}={shown!r} is not usable ({expected}); showing {used} instead.")


def shared_int(name: str, default: int, low: int, high: int) -> int:
    """An int query param clamped to [low, high]; junk falls back to the default. Either
    is said once (``not_usable``)."""
    raw = shared(name, None)
    if raw is None:
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError):
        not_usable(name, raw, f"expected an integer {low}..{high}", default)
        return default
    if not low <= value <= high:
        used = min(max(value, low), high)
        not_usable(name, raw, f"expected {low}..{high}", used)
        return used
    return value


def shared_float(name: str, default: float, low: float, high: float) -> float:
    """A float query param clamped to [low, high]; junk (or NaN) falls back to the default.
    Either is said once (``not_usable``)."""
    raw = shared(name, None)
    if raw is None:
        return default
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = float("nan")
    if value != value:
        not_usable(name, raw, f"expected a number {low:g}..{high:g}", default)
        return default
    if not low <= value <= high:
        used = min(max(value, low), high)
        not_usable(name, raw, f"expected {low:g}..{high:g}", used)
        return used
    return value


def shared_choice(name: str, options, default):
    """A query param that must be one of ``options``; another value falls back to
    ``default``, said once (``not_usable``)."""
    raw = shared(name, None)
    if raw is None:
        return default
    if raw in options:
        return raw
    not_usable(name, raw, "expected one of " + ", ".join(map(str, options)), default)
    return default


# --- the store ---------------------------------------------------------------------------

def store():
    """The results store ($MCAP_STORE or ./.mcap/store.sqlite), opened once per server
    (read-only when it or its folder cannot be written). None, with an error shown, when
    the file is not a usable store."""
    try:
        return open_store_or_raise()
    except McapError as exc:
        error(exc, "The results store cannot be used: ")
        return None


def open_store_or_raise():
    """The store as :func:`store` opens it, an McapError when it cannot be used, and
    nothing drawn: for code that may run inside a cached function, where an st.error would
    be replayed on every later cache hit."""
    from mcap.store import default_store_path
    return _open_store(str(default_store_path()))


@st.cache_resource(show_spinner=False)
def _open_store(path: str):
    from mcap.store import open_store
    return open_store(path, read_only=None)


# --- errors ------------------------------------------------------------------------------

def message(exc) -> str:
    """An error's text with the server's absolute paths left out (issue 28): a file in the
    data folder by its name there, the data folder as "the data folder", the store by its
    file name. A visitor learns what is wrong, not where the server keeps things."""
    from mcap.store import default_store_path
    text = str(exc)
    places = []
    for folder, name in ((datasets.datasets_dir(), "the data folder"),
                         (default_store_path().parent, None)):
        for form in {str(folder), str(folder.resolve())}:
            if form not in ("", ".", "/"):
                places.append((form, name))
    for form, name in sorted(places, key=lambda p: -len(p[0])):
        text = text.replace(form.rstrip("/") + "/", "")
        if name:
            text = text.replace(form, name)
    return text


def error(exc, prefix: str = "") -> None:
    """``st.error`` of an error (an McapError or a text), paths as :func:`message` shows."""
    st.error(prefix + message(exc))


def store_revision() -> tuple:
    from mcap.store import default_store_path
    return datasets.file_revision(default_store_path())


# --- datasets ----------------------------------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=32)
def _load(param: str, revision: tuple, where: str, _store):
    """A bundled or stored dataset; ``revision`` keys the cache on its content and ``where``
    on the store file. The store is opened by the caller: an st.error shown in here would be
    replayed on every later cache hit, whatever the store is by then."""
    return datasets.load(datasets.parse_ref(param), _store)


@st.cache_data(show_spinner=False, max_entries=8)
def _load_upload(name: str, digest: str, _data: bytes):
    return datasets.load_upload(name, _data)


def revision_of(ref: datasets.DatasetRef) -> tuple:
    if ref.source == "bundled":
        return datasets.file_revision(datasets.datasets_dir() / ref.key)
    return store_revision()


def choices(kind: str) -> list[datasets.DatasetRef]:
    """Bundled files, then the store's, then this session's uploads, of one kind."""
    refs = sorted((r for r in datasets.bundled() if r.kind == kind),
                  key=lambda r: example_rank(kind, r))  # the default first, then the second example
    s = store()
    if s is not None:
        try:
            refs += [r for r in datasets.in_store(s) if r.kind == kind]
        except McapError as exc:  # a row that cannot be read: say so, offer the rest
            error(exc, "The store's saved profiles and sweeps cannot be listed: ")
    for key, (k, _) in st.session_state.get("_uploads", {}).items():
        if k == kind:
            refs.append(datasets.DatasetRef("upload", kind, key, f"{_upload_name(key)} (uploaded)"))
    return refs


# Uploads are kept by this server too, under the file's name and the start of its content's
# hash, so a copied link (upload:NAME@HASH) opens the same data in another tab or browser
# for as long as the server runs; the newest few are kept.
_SERVER_UPLOADS = 16


@st.cache_resource(show_spinner=False)
def _server_uploads() -> dict:
    return {}


def _upload_name(key: str) -> str:
    return key.rsplit("@", 1)[0]


def add_upload(name: str, data: bytes) -> tuple[str, str]:
    """Load an uploaded file; keep it for this session and this server; return its kind and
    its shareable param ``upload:NAME@HASH`` (or raise McapError)."""
    digest = hashlib.sha256(data).hexdigest()
    dataset = _load_upload(name, digest, data)
    kind = "profile" if isinstance(dataset, Profile) else "sweep"
    key = f"{name}@{digest[:12]}"
    st.session_state.setdefault("_uploads", {})[key] = (kind, data)
    kept = _server_uploads()
    kept.pop(key, None)
    kept[key] = (kind, data)
    while len(kept) > _SERVER_UPLOADS:
        kept.pop(next(iter(kept)))
    return kind, f"upload:{key}"


def open_dataset(param: str):
    """The dataset a ref names; raises McapError for bad or missing ones."""
    ref = datasets.parse_ref(param)
    if ref.source == "upload":
        kept = st.session_state.get("_uploads", {}).get(ref.key) or _server_uploads().get(ref.key)
        if kept is None:
            raise McapError(f"uploaded file {_upload_name(ref.key)!r} is not on this server (it "
                            "was uploaded before the server restarted, or elsewhere); upload it "
                            "again on the Overview page")
        st.session_state.setdefault("_uploads", {})[ref.key] = kept  # the pickers list it
        return _load_upload(_upload_name(ref.key), hashlib.sha256(kept[1]).hexdigest(), kept[1])
    if ref.source == "store":
        from mcap.store import default_store_path
        return _load(param, revision_of(ref), str(default_store_path()), open_store_or_raise())
    return _load(param, revision_of(ref), "", None)


def press_profiles() -> list[datasets.DatasetRef]:
    """The bundled profiles with MPress statistics, for pages that need them (Memory savers)."""
    out = []
    for ref in choices("profile"):
        if ref.source != "bundled" or \
                not datasets.may_hold_key(datasets.datasets_dir() / ref.key, "press"):
            continue  # only a file that names press statistics is opened whole
        try:
            data = open_dataset(ref.param)
        except McapError:
            continue
        if isinstance(data, Profile) and data.press is not None:
            out.append(ref)
    return out


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
        error(exc, f"Cannot open {kind} {message(param)!r}: ")
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


_PAGE_PROFILE = "_page_profile"


def profile_param() -> Optional[str]:
    """The profile this page computes with: the one profile_for chose for this page, else
    the shared choice."""
    return st.session_state.get(_PAGE_PROFILE) or shared("profile")


def dataset_name(kind: str) -> str:
    """The chosen dataset's name for figure subtitles: "vgg11-h512-b8-cpu4-full.sweep.json"."""
    param = shared(kind) or ""
    name = param.split(":", 1)[-1]
    return _upload_name(name) if param.startswith("upload:") else name


def caption_of(data) -> str:
    s = data.setup
    return (f"{data.model.spec} · {data.model.num_layers} layers · {s.stages} stages · batch "
            f"{s.batch_size} in {s.chunks} micro-batch{'' if s.chunks == 1 else 'es'} · "
            f"{s.schedule}, checkpoint {s.checkpoint} · {s.device}/{s.engine}")


# --- showing things ----------------------------------------------------------------------

def chart(fig, key: str, name: str, **kwargs):
    """A plotly chart whose mode bar exports a PNG named after the figure."""
    config = {**PLOT_CONFIG, "toImageButtonOptions": {**EXPORT, "filename": f"mcap-{name}"}}
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


def sweep_for(profile: Profile, sweep: Optional[Sweep]) -> Optional[Sweep]:
    """The sweep if its measurements belong to ``profile``'s model and setup; else a
    caption saying why its measured peaks are left out, and None."""
    if sweep is None:
        return None
    why = mismatch(profile, sweep)
    if why is None:
        return sweep
    st.caption(f"Measured peaks from the chosen sweep are not shown: {why}.")
    return None


def profile_for(sweep: Sweep, profile: Profile) -> Profile:
    """A profile whose predictions can be compared with ``sweep``: the chosen one if it
    matches, else the first matching one on offer, used on this page only: the chosen
    profile stays chosen, a note says so and offers the switch. Stops the page with
    st.error when none matches."""
    if mismatch(profile, sweep) is None:
        return profile
    for ref in choices("profile"):
        try:
            other = open_dataset(ref.param)
        except McapError:
            continue
        if isinstance(other, Profile) and mismatch(other, sweep) is None:
            st.session_state[_PAGE_PROFILE] = ref.param
            st.info(f"This page uses the profile {ref}, measured on this sweep's model and setup: "
                    f"the chosen profile {shared('profile')} was not ({mismatch(profile, sweep)}). "
                    f"The chosen profile stays chosen on the other pages.")
            if st.button(f"Make {ref.key} the chosen profile", key="switch-profile"):
                remember("profile", ref.param)
                st.rerun()
            return other
    st.error(f"No profile matches this sweep: {mismatch(profile, sweep)}. "
             f"Profile the sweep's model with the same setup, or choose another sweep.")
    st.stop()
