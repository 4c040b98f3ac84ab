"""The store's one SQLite connection and its transactions (the base of ``Store``).

Concurrency: the file is in WAL journal mode, so the dashboard reads while a job writes;
writers from several processes take turns (``BEGIN IMMEDIATE`` plus a busy timeout).
One ``Store`` may be shared by threads (Streamlit runs pages in threads): a lock
serialises its use of the one connection. A measured run the store refuses (busy past
``$MCAP_STORE_WAIT``, a full disk) goes to the recovery file (``_patient``,
``mcap.store.recovery``).
"""
from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Union

from mcap.core.errors import McapError, StoreError
from mcap.store import recovery
from mcap.store.opening import BUSY_TIMEOUT_S, connect, resolve_path, writable


class Connection:
    """Opening, closing and the read and write transactions every query of ``Store`` runs
    in (``mcap.store.core.Store`` adds the queries)."""

    def __init__(self, path: Union[str, os.PathLike, None] = None, *,
                 read_only: Optional[bool] = False):
        """``read_only``: True opens an existing store for reading only (nothing is created
        or changed; ``export`` uses it); None decides by the file: read-only when it exists
        and it or its folder cannot be written (a read-only mount; the dashboard uses it)."""
        self.path: Path = resolve_path(path)
        if read_only is None:
            read_only = self.path.is_file() and not writable(self.path)
        self.read_only = bool(read_only)
        self._lock = threading.RLock()
        self._conn: Optional[sqlite3.Connection] = connect(self.path, read_only=self.read_only)
        self._pid = os.getpid()
        self.progress = recovery.stderr_progress  # (path, waited s, limit s) while busy
        if not self.read_only and recovery.pending(self.path):
            self._import_pending()

    def _import_pending(self) -> None:
        """Runs kept in the recovery file while the store was busy come in now; a store
        still busy is not waited for (the file stays for the next command)."""
        def note(text):
            print(f"mcap: {text}", file=sys.stderr, flush=True)
        self._conn.execute("PRAGMA busy_timeout = 1000")
        try:
            recovery.import_into(self, note)
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    # --- lifetime ---------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> "Connection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({str(self.path)!r})"

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: all of it is stored, or none of it.

        ``BEGIN IMMEDIATE`` takes the write lock up front. With Python's default deferred
        transaction a read-then-write could fail at once with "database is locked" when
        another process wrote in between (the busy timeout does not cover that upgrade).
        """
        with self._lock:
            conn = self._connection()
            if self.read_only:
                raise StoreError(f"store {self.path} is open read-only (it or its folder "
                                 f"cannot be written); nothing can be stored there")
            try:
                if conn.in_transaction:  # a signal cut a previous ROLLBACK short
                    conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: cannot start a write: {exc}") from exc
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise StoreError(f"store {self.path}: write failed, nothing was "
                                     f"stored: {exc}") from exc
                raise

    def _patient(self, write, line: Callable[[], dict]):
        """``write(conn)`` in one write transaction, for a measured run: a store busy with
        another process's lock is waited for longer than an ordinary write (progress every
        few seconds, ``recovery.wait_seconds``); if it still refuses (busy, a full disk, a
        read-only file), the run (``line()``) is kept in the recovery file and StoreError
        names it (``mcap.store.recovery``)."""
        limit, started = recovery.wait_seconds(), time.monotonic()
        step = max(0.05, min(recovery.PROGRESS_EVERY_S, limit))
        with self._lock:
            conn = self._connection()
            if not self.read_only:
                conn.execute(f"PRAGMA busy_timeout = {int(step * 1000)}")
            try:
                while True:
                    try:
                        with self._write() as conn:
                            return write(conn)
                    except StoreError as exc:
                        if not isinstance(exc.__cause__, sqlite3.Error) and not self.read_only:
                            raise  # not the store refusing: a bad record, nothing to keep
                        waited = time.monotonic() - started
                        if recovery.busy(exc) and waited < limit:
                            self.progress(self.path, waited, limit)
                            continue
                        why = (f"the store {self.path} stayed busy for {waited:.0f} s (another "
                               f"process holds its lock)" if recovery.busy(exc) else str(exc))
                        try:
                            kept = line()
                        except McapError as other:  # the study itself cannot be read now
                            raise StoreError(f"{why}; the measured run could not be kept "
                                             f"either ({other})") from None
                        raise recovery.kept_or_explain(self.path, kept, why) from None
            finally:
                if not self.read_only and self._conn is not None:
                    self._conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        """A consistent snapshot for reads spanning several statements."""
        with self._lock:
            conn = self._connection()
            try:
                if conn.in_transaction:  # a signal cut a previous ROLLBACK short
                    conn.execute("ROLLBACK")
                conn.execute("BEGIN")
                yield conn
            except sqlite3.Error as exc:
                raise StoreError(f"store {self.path}: read failed: {exc}") from exc
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"store {self.path} is closed")
        if os.getpid() != self._pid:
            # A SQLite connection must not cross fork(): both processes would share its
            # locks and could corrupt the file. A child opens its own Store.
            raise StoreError(f"store {self.path} was opened in process {self._pid}; "
                             f"process {os.getpid()} must open it again (Store(path))")
        return self._conn
