"""Finding, checking and creating the store file without ever harming someone else's.

A file is only written to once it is known to be an mcap store of the schema version
this code reads, or when it is new (missing, or zero bytes long). Everything else --
a file that is not SQLite, a corrupt SQLite file, another application's database, a
store of a newer schema -- raises ``StoreError`` naming the path and what was found,
and is checked through a read-only connection, so its bytes stay as they were.
"""
from __future__ import annotations

import os
import sqlite3
import stat
import time
from pathlib import Path
from typing import Union

from mcap.core.errors import StoreError
from mcap.files import owned, paths
from mcap.store.schema import (  # noqa: F401  (_SCHEMA, SCHEMA_VERSION: importable here)
    _SCHEMA, APPLICATION_ID, SCHEMA_VERSION, _check_version, _create, _foreign_message,
    _migrate, _table_names)

# How long a writer waits for another process's write transaction before giving up.
BUSY_TIMEOUT_S = 30.0

_SQLITE_MAGIC = b"SQLite format 3\x00"


def default_store_path() -> Path:
    """``$MCAP_STORE`` if set, else ``.mcap/store.sqlite`` under the current directory."""
    env = os.environ.get("MCAP_STORE")  # checked as text where it is opened (check_path)
    return Path(env) if env else Path.cwd() / ".mcap" / "store.sqlite"


def resolve_path(path: Union[str, os.PathLike, None]) -> Path:
    return default_store_path() if path is None else Path(path)


# Files SQLite and mcap keep beside a store: its write-ahead log and shared memory (WAL
# mode), a rollback journal (an older store, or SQLite's fallback), the recovery file
# (``mcap.store.recovery``). Each is written through whatever the path names, so each passes
# the store's own test (``mcap.files.owned``) before any connection is made.
NEIGHBOURS = {"-wal": "write-ahead log", "-shm": "shared-memory file",
              "-journal": "rollback journal", ".recovery.jsonl": "recovery file"}


def check_path(path: Path, *, owner: bool = True) -> bool:
    """Whether ``path`` is a new store (missing, or a zero-byte regular file); StoreError
    for anything mcap must not write (issue 38, ``mcap.files.owned``): a folder, a FIFO, a
    device such as /dev/null (SQLite would put its -journal beside it, in /dev), a socket, a
    symbolic link (never followed), a file with other names (hard links), another user's
    file or one every user may write (``owner=False``, for reading only, leaves these two
    out). Its neighbours (:data:`NEIGHBOURS`) pass the same test, missing or not."""
    path = _checked_text(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # under a file, in /proc, no permission: say so, no traceback
        raise StoreError(f"cannot use {path} as the store: {exc.strerror or exc}") from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise StoreError(f"store path {path} is a directory (a folder), not a file")
        if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
            raise StoreError(f"store path {path} is {file_kind(st.st_mode)}, not a regular "
                             f"file; a store is a regular file or a path that does not exist yet")
    check_neighbours(path, owner=owner)
    _owned(path, "the store", owner)
    return st is None or st.st_size == 0


def _checked_text(path) -> Path:
    try:
        return paths.checked(path, "the store path")
    except paths.BadPath as exc:
        raise StoreError(str(exc)) from None


def _owned(path: Path, what: str, owner: bool) -> None:
    try:
        owned.check(path, what, owner=owner)
    except owned.UnsafeFile as exc:
        raise StoreError(str(exc)) from None


def check_neighbours(path: Path, *, owner: bool = True) -> None:
    """StoreError unless each of the store's neighbour files (:data:`NEIGHBOURS`) is missing
    or a regular file of this user's (``mcap.files.owned``): a ``-wal`` linked to another
    file would have SQLite write its log into that file."""
    for suffix, name in NEIGHBOURS.items():
        _owned(Path(f"{path}{suffix}"), f"the store's {name}", owner)


def file_kind(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISDIR, "a folder")):
        if test(mode):
            return name
    return "not a regular file"


def writable(path: Path) -> bool:
    """Whether the store file and its folder can be written (a read-only mount says no,
    to root too: EROFS). SQLite writes -wal and -shm files beside the store."""
    folder = path.parent if str(path.parent) else Path(".")
    return os.access(path, os.W_OK) and os.access(folder, os.W_OK | os.X_OK)


def connect(path: Path, read_only: bool = False) -> sqlite3.Connection:
    """Check ``path`` (creating it when new) and return a read-write connection to it, or
    with ``read_only`` a read-only one to an existing store (nothing is created or changed:
    a store on a read-only mount is read as it is, an older schema upgraded in memory only).

    A read-write connection is in autocommit mode (``isolation_level=None``): the store
    opens its own ``BEGIN IMMEDIATE`` transactions, see ``Store._write``.
    """
    new = check_path(path, owner=not read_only)
    if read_only:
        if new:
            raise StoreError(f"store {path} does not exist" if not path.exists()
                             else f"store {path} is empty: nothing to read")
        check_existing(path)
        return _connect_read_only(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StoreError(f"cannot use {path} as the store: {exc.strerror or exc}") from None
    if not new:
        check_existing(path)
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path}: {exc}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if new:
            _create(conn, path)
        # WAL lets the dashboard read while a job writes (readers never block writers).
        # It is persistent in the file, so only the creator really switches it.
        mode = _switch_to_wal(conn)
        if mode.lower() != "wal":
            raise StoreError(f"store {path} could not switch to WAL journal mode (got {mode!r})")
        conn.execute("PRAGMA synchronous = NORMAL")  # durable across crashes in WAL mode
        conn.execute("PRAGMA foreign_keys = ON")
        if not new:
            _migrate(conn, path)
    except sqlite3.Error as exc:  # a read-only folder shows here, at the first write
        conn.close()
        raise StoreError(f"cannot open store {path}: {exc}") from exc
    except BaseException:
        conn.close()
        raise
    return conn


def _ro_uri(path: Path, immutable: bool) -> str:
    # immutable: a WAL store whose folder cannot be written has no -shm to share, and
    # mode=ro cannot open it ("unable to open database file"); nobody can write it either,
    # so reading it as immutable is exact.
    return path.resolve().as_uri() + ("?immutable=1" if immutable else "?mode=ro")


def _open_ro(path: Path) -> sqlite3.Connection:
    """A read-only connection that has read the header (a WAL store on a read-only mount
    is opened immutable); sqlite3 errors pass through."""
    for immutable in (False, True):
        conn = sqlite3.connect(_ro_uri(path, immutable), uri=True, timeout=BUSY_TIMEOUT_S,
                               check_same_thread=False)
        try:
            conn.execute("PRAGMA schema_version").fetchone()
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if immutable or "unable to open" not in str(exc) or writable(path):
                raise
    raise AssertionError("unreachable")


def _connect_read_only(path: Path) -> sqlite3.Connection:
    try:
        conn = _open_ro(path)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path} read-only: {exc}") from None
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
        if conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
            # An older store read-only: upgrade a copy in memory, never the file.
            memory = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
            conn.backup(memory)
            conn.close()
            conn = memory
            _migrate(conn, path)
    except sqlite3.Error as exc:
        conn.close()
        raise StoreError(f"cannot read store {path}: {exc}") from None
    return conn


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    """Switch the file to WAL (a no-op once it is) and return the journal mode.

    Changing the journal mode needs an exclusive lock, and SQLite answers "database is
    locked" at once, without its busy handler, while another connection holds a lock it
    might need (processes racing to create one store: one switches while another still
    reads the schema). So wait and retry, as the busy timeout would, up to the same time.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.005
    while True:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() == "wal":
            return mode
        try:
            return conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            if time.monotonic() > deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def check_existing(path: Path) -> None:
    """Raise StoreError unless ``path`` is an intact mcap store of our schema version.

    Reads only, through a read-only connection (``mode=ro``), so a file that is not ours
    is left byte for byte as it was.
    """
    try:
        with open(path, "rb") as fh:
            header = fh.read(100)
    except OSError as exc:
        raise StoreError(f"cannot read store {path}: {exc}") from exc
    if not header.startswith(_SQLITE_MAGIC):
        raise StoreError(f"{path} is not an mcap store: it is not a SQLite database "
                         f"(it starts with {header[:16]!r}); nothing was changed")
    if len(header) < 100:
        raise StoreError(f"{path} is a corrupt SQLite file: its header is {len(header)} "
                         f"bytes, a SQLite header is 100; nothing was changed")
    # A WAL-mode file makes even a read-only connection create empty -wal and -shm
    # files beside it; when we refuse the file we remove the ones we created.
    sidecars = [Path(f"{path}-wal"), Path(f"{path}-shm")]
    existed = [p.exists() for p in sidecars]
    try:
        _check_sqlite(path)
    except StoreError:
        for p, was_there in zip(sidecars, existed):
            if not was_there and p.exists() and (p.name.endswith("-shm") or p.stat().st_size == 0):
                p.unlink()
        raise


def _check_sqlite(path: Path) -> None:
    try:
        ro = _open_ro(path)
    except sqlite3.DatabaseError as exc:
        if isinstance(exc, sqlite3.OperationalError):  # locked, unreadable: not corrupt
            raise StoreError(f"cannot open store {path} to check it: {exc}") from None
        raise StoreError(f"{path} is a corrupt SQLite file ({exc}); nothing was changed") from None
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open store {path} to check it: {exc}") from None
    try:
        app_id = ro.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise StoreError(_foreign_message(path, app_id, _table_names(ro)))
        _check_version(ro, path)
        # quick_check reads every page: a truncated or overwritten file fails here, before
        # anything is written to it. Cost: see BENCHMARKS.md, "Results store".
        problems = [row[0] for row in ro.execute("PRAGMA quick_check(5)")]
        if problems != ["ok"]:
            found = "; ".join(line for p in problems for line in p.splitlines())
            raise StoreError(f"{path} is a corrupt mcap store: {found}; "
                             f"nothing was changed")
    except sqlite3.OperationalError as exc:  # locked, unreadable, no room for -shm: not corrupt
        raise StoreError(f"cannot read store {path} to check it: {exc}") from exc
    except sqlite3.DatabaseError as exc:  # SQLITE_CORRUPT, SQLITE_NOTADB
        raise StoreError(f"{path} is a corrupt SQLite file ({exc}); nothing was changed") from exc
    finally:
        ro.close()
