"""What every page reads first: the shareable state in query params (a copied URL reopens
it), the page navigation, the results store opened once per server, and errors shown with
the server's paths left out. Not a page; ``pages/_shared.py`` re-exports all of it."""
from __future__ import annotations

import re
from typing import Optional

import streamlit as st

from mcap.app import links
from mcap.core.errors import McapError
from mcap.io import datasets

# The state a copied URL reopens (issue 5, Everywhere).
SHARED_KEYS = ("profile", "sweep", "stages", "method", "predictor", "seed", "balance", "schedule",
               "scale", "mesh", "plan", "chunks", "capacity", "plan_capacity", "planner",
               "plan_device", "iterations", "estimates")
# A profile profile_for (pages/_datasets.py) chose for this page only; restore_url drops it.
_PAGE_PROFILE = "_page_profile"


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
    if links.DROPPED in st.query_params:  # a link the server dropped whole (bin/serve.py)
        text = st.query_params[links.DROPPED]
        del st.query_params[links.DROPPED]
        said = st.session_state.setdefault("_said_bad_values", set())
        if (links.DROPPED, text) not in said:
            said.add((links.DROPPED, text))
            st.warning(links.sentence(text))
    st.session_state.pop(_PAGE_PROFILE, None)  # a page-only profile (profile_for) ends here
    st.session_state.pop("_mismatch_said", None)  # said once per page run (sweep_for)
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


def shared_balance(layers: int, used: str) -> Optional[tuple[int, ...]]:
    """The shared partitioning as layer counts of a model of ``layers`` layers, or None when
    there is none. One that is no list of layer counts, or whose counts sum to another
    model's layers, is said once (``not_usable``) naming what ``used`` is shown instead
    (issue 38, item 6: Partition space and Memory savers replaced it without a word)."""
    from mcap.core.partition import parse_balance
    raw = shared("balance", None)
    if raw is None:
        return None
    try:
        balance = parse_balance(raw)
    except McapError:
        not_usable("balance", raw, "expected layer counts such as 3,3,5,19", used)
        return None
    if sum(balance) != layers:
        not_usable("balance", raw, f"its {len(balance):,} layer counts sum to {sum(balance):,} "
                                   f"but this model has {layers} layers", used)
        return None
    return balance


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
    return _LONG.sub(_cut, text)


# A run of more than 120 characters without a space in a message is a value a link or a box
# carried (a balance of 10^5 layer counts): shown by its start and its length, not whole.
_LONG = re.compile(r"\S{121,}")


def _cut(match) -> str:
    word = match.group(0)
    return f"{word[:60]}… ({len(word):,} characters)"


def error(exc, prefix: str = "") -> None:
    """``st.error`` of an error (an McapError or a text), paths as :func:`message` shows."""
    st.error(prefix + message(exc))


def store_revision() -> tuple:
    from mcap.store import default_store_path
    return datasets.file_revision(default_store_path())
