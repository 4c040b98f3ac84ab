"""The profiles and sweeps the pages show: bundled, stored and uploaded ones listed and
loaded (cached on their content revision, ARCHITECTURE.md, Dashboard), the chosen one of
each kind, and a profile matched to a sweep. Not a page; ``pages/_shared.py`` re-exports
all of it."""
from __future__ import annotations

import hashlib
from typing import Optional

import streamlit as st

from mcap.core.errors import McapError
from mcap.core.setup import matching, mismatch
from mcap.core.types import Profile, Sweep
from mcap.io import datasets
from pages._state import (
    _PAGE_PROFILE, error, message, not_usable, open_store_or_raise, remember, shared, store,
    store_revision,
)

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


# Datasets are frozen dataclasses that nothing changes: the cache hands out the object
# itself (st.cache_resource) rather than a copy (st.cache_data unpickled the full VGG11
# sweep, 3,654 runs, on every call: 0.6 s of a 0.9-s profile switch, issue 40 item 3).
# The key is the content revision all the same.
@st.cache_resource(show_spinner=False, max_entries=32)
def _load(param: str, revision: tuple, where: str, _store):
    """A bundled or stored dataset; ``revision`` keys the cache on its content and ``where``
    on the store file. The store is opened by the caller: an st.error shown in here would be
    replayed on every later cache hit, whatever the store is by then."""
    return datasets.load(datasets.parse_ref(param), _store)


@st.cache_resource(show_spinner=False, max_entries=8)
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


def _opened(kind: str, param: str):
    """The dataset ``param`` names, which must be of ``kind``; McapError otherwise."""
    data = open_dataset(param)
    if not isinstance(data, Profile if kind == "profile" else Sweep):
        other = "profile" if isinstance(data, Profile) else "sweep"
        raise McapError(f"{message(param)} is a {other}, not a {kind}")
    return data


@st.cache_data(show_spinner=False, max_entries=64)
def _matching_sweep(profile_param: str, revision: tuple, sweeps: tuple, revisions: tuple):
    """The param of the sweep ``profile_param``'s profile brings (``mcap.core.setup.matching``),
    or None; cached on the content of the profile and of every sweep on offer."""
    loaded, params = [], []
    for param in sweeps:
        try:
            loaded.append(_opened("sweep", param))
            params.append(param)
        except McapError:
            continue  # a stored sweep that cannot be read is not a match
    i = matching(_opened("profile", profile_param), loaded)
    return None if i is None else params[i]


def matching_sweep(profile_param: Optional[str]) -> Optional[str]:
    """The sweep a profile brings with it: the one of its model, setup and machine that
    every page then compares its predictions with (issue 40, item 1); None when none is on
    offer or the profile cannot be opened."""
    if profile_param is None:
        return None
    refs = choices("sweep")
    try:
        return _matching_sweep(profile_param, revision_of(datasets.parse_ref(profile_param)),
                               tuple(r.param for r in refs),
                               tuple(revision_of(r) for r in refs))
    except McapError:
        return None


def default_param(kind: str) -> Optional[str]:
    """What is shown when nothing (usable) is chosen: the first profile on offer; for a
    sweep, the one the chosen profile brings, else the first on offer."""
    if kind == "sweep":
        match = matching_sweep(chosen_param("profile"))
        if match is not None:
            return match
    refs = choices(kind)
    return refs[0].param if refs else None


def chosen_param(kind: str) -> Optional[str]:
    """The chosen profile or sweep: the link's (or this session's) when it opens as one,
    else :func:`default_param`. A link that names a dataset which cannot be used (no such
    file or id, outside the data folder, an upload this server does not have, a profile
    where a sweep is meant) is said once, naming the key and why, and replaced in the URL
    (issue 38, item 6: they were replaced by the defaults without a word)."""
    raw = shared(kind, None)
    if raw is not None:
        try:
            _opened(kind, raw)
            return raw
        except McapError as exc:
            used = default_param(kind)
            not_usable(kind, raw, message(exc), dataset_label(used) if used else f"no {kind}")
            remember(kind, used)
            return used
    return default_param(kind)


def dataset_label(param: str) -> str:
    """A dataset's name for a sentence: its file name, upload name or store id."""
    name = str(param).split(":", 1)[-1]
    return _upload_name(name) if str(param).startswith("upload:") else name


def choose_profile(param: str) -> Optional[str]:
    """Make ``param`` the chosen profile for every page, with the sweep it brings when there
    is one (issue 40, item 1); returns that sweep's param, or None (the chosen sweep stays:
    pages then say once that its measurements are of another model or setup)."""
    old = shared("profile")
    if old is not None and old != param:
        try:  # a partitioning or plan of another model would be refused on every page
            if _opened("profile", old).model.num_layers != _opened("profile", param).model.num_layers:
                remember("balance", None)
                remember("plan", None)
        except McapError:
            pass
    remember("profile", param)
    match = matching_sweep(param)
    if match is not None:
        remember("sweep", match)
    return match


def current(kind: str, required: bool = True):
    """The chosen profile or sweep (:func:`chosen_param`). Shows st.error and stops the page
    when there is none, or it cannot be opened (a store that became unreadable)."""
    param = chosen_param(kind)
    if param is None:
        if required:
            st.error(f"No {kind} to show: data/ has no *.{kind}.json and the store has none. "
                     f"Choose or upload one on the Overview page.")
            st.stop()
        return None
    try:
        data = _opened(kind, param)
    except McapError as exc:
        error(exc, f"Cannot open {kind} {message(param)!r}: ")
        if required:
            st.stop()
        return None
    remember(kind, param)
    return data


def profile_param() -> Optional[str]:
    """The profile this page computes with: the one profile_for chose for this page, else
    the shared choice."""
    return st.session_state.get(_PAGE_PROFILE) or shared("profile")


def dataset_name(kind: str) -> str:
    """The chosen dataset's name for figure subtitles: "vgg11-h512-b8-cpu4-full.sweep.json"."""
    return dataset_label(shared(kind) or "")


def caption_of(data) -> str:
    s = data.setup
    return (f"{data.model.spec} · {data.model.num_layers} layers · {s.stages} stages · batch "
            f"{s.batch_size} in {s.chunks} micro-batch{'' if s.chunks == 1 else 'es'} · "
            f"{s.schedule}, checkpoint {s.checkpoint} · {s.device}/{s.engine}")


# The mismatch this page run has said (sweep_for), so the accuracy caption does not say it
# again in other words (issue 40, item 1: a mismatch is said once, with both names).
_MISMATCH_SAID = "_mismatch_said"


def mismatch_sentence(why: str) -> str:
    """One sentence naming the chosen profile and sweep and why they cannot be compared."""
    return (f"Measured peaks are not shown: the chosen sweep {dataset_name('sweep')} cannot be "
            f"compared with the chosen profile {dataset_name('profile')} ({why}), so how far off "
            f"the predictions are is not known here either.")


def sweep_for(profile: Profile, sweep: Optional[Sweep]) -> Optional[Sweep]:
    """The sweep if its measurements belong to ``profile``'s model and setup; else one
    caption naming both and why its measured peaks are left out, and None."""
    if sweep is None:
        return None
    why = mismatch(profile, sweep)
    if why is None:
        return sweep
    st.caption(mismatch_sentence(why))
    st.session_state[_MISMATCH_SAID] = True
    return None


def mismatch_said() -> bool:
    """Whether this page run has said that the chosen profile and sweep do not match."""
    return bool(st.session_state.get(_MISMATCH_SAID))


def profile_for(sweep: Sweep, profile: Profile) -> Profile:
    """A profile whose predictions can be compared with ``sweep``: the chosen one if it
    matches, else the first matching one on offer, used on this page only. One note names
    both datasets and offers the two ways out: the sweep the chosen profile brings (when
    there is one) and making the matching profile the chosen one. Stops the page with
    st.error when no profile matches."""
    if mismatch(profile, sweep) is None:
        return profile
    why = mismatch(profile, sweep)
    own = matching_sweep(shared("profile"))
    for ref in choices("profile"):
        try:
            other = open_dataset(ref.param)
        except McapError:
            continue
        if isinstance(other, Profile) and mismatch(other, sweep) is None:
            st.session_state[_PAGE_PROFILE] = ref.param
            st.session_state[_MISMATCH_SAID] = True
            st.info(f"The chosen sweep {dataset_name('sweep')} was not measured on the chosen "
                    f"profile {dataset_name('profile')}'s model and setup ({why}). This page "
                    f"predicts its partitionings with {ref.key}, which was; the chosen profile "
                    f"stays chosen on the other pages.")
            left, right = st.columns(2)
            if own is not None and left.button(f"Use the matching sweep {dataset_label(own)}",
                                               key="use-matching-sweep",
                                               help="the sweep of the chosen profile's model, "
                                                    "setup and machine"):
                remember("sweep", own)
                st.rerun()
            if right.button(f"Make {ref.key} the chosen profile", key="switch-profile"):
                remember("profile", ref.param)
                st.rerun()
            return other
    st.error(f"No profile matches the chosen sweep {dataset_name('sweep')}: {why}. "
             f"Profile the sweep's model with the same setup, or choose another sweep.")
    if own is not None and st.button(f"Use the matching sweep {dataset_label(own)}",
                                     key="use-matching-sweep"):
        remember("sweep", own)
        st.rerun()
    st.stop()
