"""The datasets the dashboard can open: bundled files in ``data/``, profiles and sweeps in
the store, and uploaded ``mcap.profile/1`` / ``mcap.sweep/1`` files.

A ``DatasetRef`` names one of them in a short text form (``bundled:vgg11-cpu4.profile.json``,
``store:profile:3``, ``upload:my.json``) that fits in a URL query parameter, so a copied
link reopens the same data. Reading goes through ``mcap.io.jsonio`` and the store; bad input
raises ``McapError`` naming the file and what is wrong.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from mcap.core.errors import McapError, SchemaError
from mcap.core.types import Profile, Sweep

DATA_DIR = Path(__file__).resolve().parents[2] / "data"  # the bundled, real datasets
SOURCES = ("bundled", "store", "upload")
KINDS = ("profile", "sweep")
MAX_UPLOAD_BYTES = 64 * 1024 * 1024

Dataset = Union[Profile, Sweep]


@dataclass(frozen=True)
class DatasetRef:
    source: str  # "bundled", "store" or "upload"
    kind: str    # "profile" or "sweep"
    key: str     # file name, store id, or upload name
    label: str = ""

    @property
    def param(self) -> str:
        """The query-parameter form; ``parse_ref`` reads it back."""
        if self.source == "store":
            return f"store:{self.kind}:{self.key}"
        return f"{self.source}:{self.key}"

    def __str__(self) -> str:
        return self.label or self.param


def kind_of_file(name: str) -> Optional[str]:
    """``*.profile.json`` -> "profile", ``*.sweep.json`` -> "sweep", else None."""
    for kind in KINDS:
        if name.endswith(f".{kind}.json"):
            return kind
    return None


def datasets_dir() -> Path:
    """``$MCAP_DATA_DIR`` if set (another folder of datasets), else the bundled ``data/``."""
    env = os.environ.get("MCAP_DATA_DIR")
    return Path(env).resolve() if env else DATA_DIR


def bundled(data_dir: Optional[Path] = None) -> tuple[DatasetRef, ...]:
    """The real measured datasets shipped in ``data/``, profiles first, by name."""
    data_dir = datasets_dir() if data_dir is None else data_dir
    if not data_dir.is_dir():
        return ()
    # The files shipped in data/ are "bundled"; another folder ($MCAP_DATA_DIR) is named
    # as what it is, not passed off as the project's own data.
    where = "bundled" if data_dir.resolve() == DATA_DIR.resolve() else "from MCAP_DATA_DIR"
    refs = []
    for path in sorted(data_dir.iterdir()):
        kind = kind_of_file(path.name)
        if kind is not None and path.is_file():
            refs.append(DatasetRef("bundled", kind, path.name, f"{path.name} ({where})"))
    return tuple(sorted(refs, key=lambda r: (KINDS.index(r.kind), r.key)))


def in_store(store) -> tuple[DatasetRef, ...]:
    """Saved profiles and sweeps of a ``mcap.store.Store``, newest first."""
    import time
    refs = []
    for kind, summaries in (("profile", store.list_profiles()), ("sweep", store.list_sweeps())):
        for s in reversed(summaries):
            name = s.name or f"{kind} {s.id}"
            # the id and the time it was saved tell apart profiles of one name and model
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.created)) if s.created else ""
            refs.append(DatasetRef("store", kind, str(s.id),
                                   f"{name}: {s.spec}, {s.setup.stages} stages, {s.num_runs} "
                                   f"run{'' if s.num_runs == 1 else 's'} "
                                   f"(store #{s.id}{', ' + when if when else ''})"))
    return tuple(refs)


# The longest ref a link may name: a file name is at most 255 bytes (NAME_MAX) and a store
# id 18 digits, so anything longer names nothing that exists (issue 38, item 6).
MAX_REF_CHARS = 300


def parse_ref(text: str) -> DatasetRef:
    """A query parameter back to a ref; raises McapError naming the text when malformed: not
    one of the forms, longer than :data:`MAX_REF_CHARS`, or holding a control character
    (a NUL in a file name made ``Path.resolve`` raise ValueError)."""
    text = str(text)
    if len(text) > MAX_REF_CHARS:
        raise McapError(f"dataset name of {len(text):,} characters: no dataset has a name "
                        f"longer than {MAX_REF_CHARS}")
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise McapError(f"dataset {text!r} has a control character in its name")
    source, _, rest = text.partition(":")
    if source == "store":
        kind, _, key = rest.partition(":")
        # ASCII digits only ("²".isdigit() is True) and an id SQLite can hold (< 2**63)
        if kind in KINDS and key.isascii() and key.isdigit() and len(key) <= 18 and int(key) >= 1:
            return DatasetRef("store", kind, str(int(key)))
    elif source in ("bundled", "upload") and rest:
        kind = kind_of_file(rest) if source == "bundled" else None
        return DatasetRef(source, kind or "", rest)
    raise McapError(f"dataset {text!r} is not of the form bundled:NAME, store:profile:ID, "
                    f"store:sweep:ID or upload:NAME")


def load(ref: DatasetRef, store=None, data_dir: Optional[Path] = None) -> Dataset:
    """Open a bundled file or a stored profile/sweep (uploads: ``load_upload``)."""
    if ref.source == "bundled":
        data_dir = datasets_dir() if data_dir is None else data_dir
        try:
            path = (data_dir / ref.key).resolve()
            outside = path.parent != data_dir.resolve()
            found = not outside and path.is_file()
        except (OSError, ValueError) as exc:  # a NUL, a name too long for the file system
            raise McapError(f"dataset {ref.key[:80]!r} is not a file in {data_dir} "
                            f"({exc.strerror if isinstance(exc, OSError) else exc})") from None
        if outside:
            raise McapError(f"dataset {ref.key!r} is not a file in {data_dir}")
        if not found:
            raise McapError(f"bundled dataset {ref.key!r} not found in {data_dir}")
        return _load_path(path)
    if ref.source == "store":
        if store is None:
            raise McapError(f"dataset {ref.param} needs the store, which is not open")
        return store.load_profile(int(ref.key)) if ref.kind == "profile" else store.load_sweep(int(ref.key))
    raise McapError(f"dataset {ref.param} was uploaded in another session; upload it again")


def load_upload(name: str, data: bytes) -> Dataset:
    """An uploaded file: must be an ``mcap.profile/1`` or ``mcap.sweep/1`` JSON document."""
    if len(data) == 0:
        raise SchemaError(f"uploaded file {name!r} is empty")
    if len(data) > MAX_UPLOAD_BYTES:
        raise SchemaError(f"uploaded file {name!r} is {len(data):,} bytes; the limit is "
                          f"{MAX_UPLOAD_BYTES:,}")
    # jsonio reads files; give it one, so uploads and bundled data take the same path.
    fd, tmp = tempfile.mkstemp(suffix=".json", prefix="mcap-upload-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        try:
            return _load_path(Path(tmp))
        except McapError as exc:
            raise type(exc)(str(exc).replace(tmp, repr(name))) from None
    finally:
        os.unlink(tmp)


def _load_path(path: Path) -> Dataset:
    from mcap.io.jsonio import load_any  # the core's one JSON reader (mcap.profile/1, mcap.sweep/1)
    data = load_any(path)
    if not isinstance(data, (Profile, Sweep)):
        raise SchemaError(f"{path.name} holds a {type(data).__name__}, not a profile or a sweep")
    return data


def may_hold_key(path: Union[str, Path], key: str, chunk: int = 2**20) -> bool:
    """Whether the JSON file ``path`` may hold the object key ``key`` (``"key":``), read in
    chunks of ``chunk`` bytes (constant memory), without decoding it: a listing asks this
    before opening a file whole (issue 28: the dashboard read every file of the data folder
    on a fresh visit). False for a file that cannot be read or is above the size cap; a
    True is confirmed by opening the file."""
    from mcap.io.jsonio import MAX_FILE_BYTES
    pattern = re.compile(rb'"' + re.escape(key.encode()) + rb'"\s*:')
    try:
        if not os.path.isfile(path):  # a FIFO would block the open
            return False
        with open(path, "rb") as fh:
            if os.fstat(fh.fileno()).st_size > MAX_FILE_BYTES:
                return False
            tail = b""
            while True:
                data = fh.read(chunk)
                if not data:
                    return False
                if pattern.search(tail + data):
                    return True
                tail = data[-(len(key) + 64):]
    except OSError:
        return False


def file_revision(path: Union[str, Path]) -> tuple:
    """A cheap content key for ``st.cache_data``: (mtime_ns, size) of a file and, for the
    SQLite store in WAL mode, of its ``-wal`` file (where new writes land first)."""
    out = []
    for p in (Path(path), Path(f"{path}-wal")):
        try:
            st = p.stat()
            out.append((st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)
