"""The results store: every measured run, profile, sweep and job, in one SQLite file.

Nothing measured is ever lost: ``record_run`` is called as each run finishes, inside its
own transaction, so a profile killed half-way keeps every run it finished and the
next ``python -m mcap profile`` finds them with ``find_run`` instead of measuring again.

Concurrency: the file is in WAL journal mode, so the dashboard reads while a job writes;
writers from several processes take turns (``BEGIN IMMEDIATE`` plus a busy timeout).
One ``Store`` may be shared by threads (Streamlit runs pages in threads): a lock
serialises its use of the one connection.
"""
from __future__ import annotations

import dataclasses
import os
import sqlite3
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

from mcap.core import fields
from mcap.core.capture import merging
from mcap.core.errors import McapError, StoreError
from mcap.store import records as rec
from mcap.store import recovery
from mcap.store.checks import check_run, check_stage_run, is_int, layer_diff
from mcap.store.opening import BUSY_TIMEOUT_S, connect, resolve_path, writable
from mcap.store.records import Job, RunRecord, Study, StudySummary, Summary
from mcap.core.machine import Machine
from mcap.core.types import ModelInfo, Profile, Run, Setup, StageRun, Sweep

StudyRef = Union[Study, int]
_UNSET = object()  # "leave this job field as it is" (None means "clear it")


class Store:
    """``Store(path=None)``: open (or create) the store at ``path``.

    ``path=None`` means ``$MCAP_STORE`` if set, else ``.mcap/store.sqlite`` under the
    current directory. A corrupt file, a non-SQLite file, another application's database
    or a store of another schema version raises ``StoreError`` and is left untouched.
    """

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

    def __enter__(self) -> "Store":
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

    # --- studies ----------------------------------------------------------------------

    def study(self, model: ModelInfo, setup: Setup) -> Study:
        """The study of this (model, setup), created on first use."""
        with self._write() as conn:
            return self._get_or_create_study(conn, model, setup)

    def find_study(self, spec: str, setup: Setup) -> Optional[Study]:
        """The study of this (spec, setup) if anything was recorded for it, else None."""
        with self._read() as conn:
            row = conn.execute(f"SELECT {rec.STUDY_COLUMNS} FROM studies "
                               "WHERE key = ?", (rec.study_key(spec, setup),)).fetchone()
        return rec.study_from_row(row, self.path) if row else None

    def get_study(self, study_id: int) -> Study:
        with self._read() as conn:
            return self._study_row(conn, study_id)

    def list_studies(self) -> tuple[StudySummary, ...]:
        with self._read() as conn:
            rows = conn.execute(
                "SELECT s.id, s.spec, s.setup, COUNT(r.id), s.created FROM studies s "
                "LEFT JOIN runs r ON r.study_id = s.id GROUP BY s.id ORDER BY s.id").fetchall()
        out = []
        for i, spec, setup, n, created in rows:
            r = rec.reader(self.path, "studies", i)
            out.append(StudySummary(i, r.str_(spec, "spec"), rec.setup_from_json(setup, r), n,
                                    rec.when(created, r, "created")))
        return tuple(out)

    def _get_or_create_study(self, conn, model: ModelInfo, setup: Setup) -> Study:
        if not isinstance(model, ModelInfo) or not isinstance(setup, Setup):
            raise McapError(f"a study needs a ModelInfo and a Setup, got "
                            f"{type(model).__name__} and {type(setup).__name__}")
        if not model.layers:
            raise McapError(f"model {model.spec!r} has no layers; nothing to store")
        key = rec.study_key(model.spec, setup)
        row = conn.execute(f"SELECT {rec.STUDY_COLUMNS} FROM studies "
                           "WHERE key = ?", (key,)).fetchone()
        if row is not None:
            study = rec.study_from_row(row, self.path)
            if study.model != model:
                # Same spec, different layers: the model's code changed. Mixing its runs
                # with the old ones would make every statistic wrong.
                raise StoreError(
                    f"store {self.path} already holds model {model.spec!r} with "
                    f"{study.model.num_layers} layers ({layer_diff(study.model, model)}); "
                    f"this one differs. Use another store (MCAP_STORE) for the changed model")
            return study
        created = time.time()
        cur = conn.execute("INSERT INTO studies (key, spec, layers, setup, created) "
                           "VALUES (?, ?, ?, ?, ?)",
                           (key, model.spec, rec.model_to_json(model),
                            rec.setup_to_json(setup), created))
        return Study(cur.lastrowid, key, model, setup, created)

    def _study_row(self, conn, study: StudyRef) -> Study:
        study_id = study.id if isinstance(study, Study) else int(study)
        row = conn.execute(f"SELECT {rec.STUDY_COLUMNS} FROM studies "
                           "WHERE id = ?", (study_id,)).fetchone()
        if row is None or (isinstance(study, Study) and row[1] != study.key):
            # A Study handle from another store file would otherwise file runs under
            # whichever study happens to have its id here.
            raise McapError(f"store {self.path} has no study {study_id}"
                            + (f" for {study.model.spec!r}" if isinstance(study, Study) else ""))
        return rec.study_from_row(row, self.path)

    # --- runs -------------------------------------------------------------------------

    def record_run(self, study: StudyRef, run: Run, *, kind: str = "profile",
                   job: Optional[int] = None, machine: Optional[Machine] = None) -> int:
        """Store one finished run (ok, oom or failed) at once; returns its id. ``machine``
        is where it was measured (``Runner.machine``); None records it as unknown."""
        created = time.time()

        def write(conn):
            study_row = self._study_row(conn, study)
            return self._insert_run(conn, study_row, run, kind, self._job_id(conn, job),
                                    created, self._machine_key(conn, machine))

        def line():
            found = study if isinstance(study, Study) else self.get_study(study)
            return recovery.run_line(found.model, found.setup, run, kind=kind, job=job,
                                     machine=machine, created=created)
        return self._patient(write, line)

    def keep_run(self, model: ModelInfo, setup: Setup, run: Run, *, kind: str = "measure",
                 job: Optional[int] = None, machine: Optional[Machine] = None) -> int:
        """The study of (model, setup), created on first use, and ``run`` recorded in it, in
        one transaction that waits for a busy store and keeps the run in the recovery file
        when the store refuses it (what ``measure`` records its run with)."""
        created = time.time()

        def write(conn):
            study = self._get_or_create_study(conn, model, setup)
            return self._insert_run(conn, study, run, kind, self._job_id(conn, job), created,
                                    self._machine_key(conn, machine))
        return self._patient(write, lambda: recovery.run_line(
            model, setup, run, kind=kind, job=job, machine=machine, created=created))

    def _job_id(self, conn, job: Optional[int]) -> Optional[int]:
        return None if job is None else self._job(conn, job).id

    def runs(self, study: StudyRef, ok_only: bool = False) -> tuple[Run, ...]:
        """Every run of the study in the order they were recorded."""
        return tuple(r.run for r in self.run_records(study, ok_only=ok_only))

    def run_records(self, study: Optional[StudyRef] = None, *, job: Optional[int] = None,
                    ok_only: bool = False) -> tuple[RunRecord, ...]:
        """Runs with their ids, job, kind and time; filtered by study and/or job."""
        where, args = [], []
        if study is not None:
            where.append("study_id = ?")
            args.append(study.id if isinstance(study, Study) else int(study))
        if job is not None:
            where.append("job_id = ?")
            args.append(int(job))
        if ok_only:
            where.append("status = 'ok'")
        sql = f"SELECT {rec.RUN_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        with self._read() as conn:
            rows = conn.execute(sql + " ORDER BY id", args).fetchall()
            layers = self._layer_counts(conn, {row[1] for row in rows})
        return tuple(rec.run_record_from_row(row, self.path, layers.get(row[1])) for row in rows)

    def _layer_counts(self, conn, study_ids) -> dict:
        """The layer count of each of these studies (a run's balance must partition its
        study's layers); a study row that cannot be read raises StoreError."""
        out = {}
        for study_id in study_ids:
            if isinstance(study_id, int):
                row = conn.execute(f"SELECT {rec.STUDY_COLUMNS} FROM studies WHERE id = ?",
                                   (study_id,)).fetchone()
                if row is not None:
                    out[study_id] = rec.study_from_row(row, self.path).model.num_layers
        return out

    def find_run(self, study: StudyRef, balance: Sequence[int],
                 machine: Optional[Machine] = None) -> Optional[Run]:
        """The latest finished (ok or oom) run of this balance in the study measured on
        ``machine``, or None.

        A resumed profile reuses it instead of measuring again. Failed runs are never
        returned, so they are retried: a crash or timeout may be transient, while ok and
        oom are answers about the partitioning itself. A run of another machine is never
        returned (its peaks may differ, mcap.core.machine); ``machine=None`` finds only
        runs recorded without a fingerprint. Composed runs (``Run.composed``) are never
        returned either: they are answers derived from other runs, not measurements, so
        ``sweep --no-reuse`` still measures their partitionings.
        """
        study_id = study.id if isinstance(study, Study) else int(study)
        key = None if machine is None else machine.key()
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {rec.RUN_COLUMNS} FROM runs WHERE study_id = ? AND balance = ? "
                "AND status IN ('ok', 'oom') AND machine IS ? AND composed = 0 "
                "ORDER BY id DESC LIMIT 1",
                (study_id, rec.balance_text(balance), key)).fetchone()
            layers = self._layer_counts(conn, {study_id}) if row else {}
        return rec.run_record_from_row(row, self.path, layers.get(study_id)).run if row else None

    def record_stage(self, study: StudyRef, run: StageRun, *, job: Optional[int] = None,
                     machine: Optional[Machine] = None) -> int:
        """Store one stage measured alone (``StageRun``) at once; returns its id."""
        created = time.time()

        def write(conn):
            return self._insert_stage(conn, self._study_row(conn, study), run,
                                      self._job_id(conn, job), created,
                                      self._machine_key(conn, machine))

        def line():
            found = study if isinstance(study, Study) else self.get_study(study)
            return recovery.stage_line(found.model, found.setup, run, job=job,
                                       machine=machine, created=created)
        return self._patient(write, line)

    def _insert_stage(self, conn, study: Study, run: StageRun, job: Optional[int],
                      created: float, machine: Optional[str]) -> int:
        from mcap.core.profiling.cover import stage_keys
        check_stage_run(run, study)
        first, last, position = stage_keys(run.balance, study.setup.schedule)[run.stage]
        shown = (rec.balance_text(run.balance), int(run.stage), run.status,
                 None if run.peak is None else int(run.peak), float(run.seconds),
                 rec.times_to_json(run.times), run.error,
                 rec.breakdown_to_json(None if run.breakdown is None else (run.breakdown,)))
        _readable(lambda: rec.stage_run_from_row((0, *shown), self.path,
                                                 study.model.num_layers),
                  "stage run", run.balance)
        cur = conn.execute(
            "INSERT INTO stage_runs (study_id, job_id, first_layer, last_layer, position, "
            "balance, stage, status, peak, seconds, times, error, breakdown, created, "
            "machine) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (study.id, job, first, last, rec.dumps(position), *shown, created, machine))
        return cur.lastrowid

    def _import_recovered(self, items: Sequence[dict]) -> tuple[int, list]:
        """Store the decoded recovery lines (``recovery.import_into``) in one transaction,
        each in its own savepoint: (runs stored, per item None or why it was refused). A run
        already stored (same study, balance, kind or stage, and time) is not stored twice."""
        done, refused = 0, []
        with self._write() as conn:
            for item in items:
                conn.execute("SAVEPOINT recovered")
                try:
                    done += self._import_one(conn, item)
                    refused.append(None)
                    conn.execute("RELEASE recovered")
                except McapError as exc:
                    conn.execute("ROLLBACK TO recovered")
                    conn.execute("RELEASE recovered")
                    refused.append(str(exc))
        return done, refused

    def _import_one(self, conn, item: dict) -> int:
        study = self._get_or_create_study(conn, item["model"], item["setup"])
        machine = self._machine_key(conn, item["machine"])
        job = item["job"]
        if job is not None and conn.execute("SELECT 1 FROM jobs WHERE id = ?",
                                            (job,)).fetchone() is None:
            job = None
        run, created = item["run"], item["created"]
        if item["table"] == "runs":
            if conn.execute("SELECT 1 FROM runs WHERE study_id = ? AND balance = ? AND kind = ? "
                            "AND created = ?", (study.id, rec.balance_text(run.balance),
                                                item["kind"], created)).fetchone():
                return 0
            self._insert_run(conn, study, run, item["kind"], job, created, machine)
            return 1
        if conn.execute("SELECT 1 FROM stage_runs WHERE study_id = ? AND balance = ? AND "
                        "stage = ? AND created = ?", (study.id, rec.balance_text(run.balance),
                                                      run.stage, created)).fetchone():
            return 0
        self._insert_stage(conn, study, run, job, created, machine)
        return 1

    def stage_runs(self, study: StudyRef, machine: Optional[Machine] = None
                   ) -> tuple[StageRun, ...]:
        """The study's stages measured alone on ``machine`` (None: recorded without one),
        in the order they were recorded."""
        study_id = study.id if isinstance(study, Study) else int(study)
        key = None if machine is None else machine.key()
        with self._read() as conn:
            rows = conn.execute(
                "SELECT id, balance, stage, status, peak, seconds, times, error, breakdown "
                "FROM stage_runs WHERE study_id = ? AND machine IS ? ORDER BY id",
                (study_id, key)).fetchall()
            layers = self._layer_counts(conn, {study_id}) if rows else {}
        return tuple(rec.stage_run_from_row(row, self.path, layers.get(study_id))
                     for row in rows)

    def get_machine(self, key: str) -> Optional[Machine]:
        """The fingerprint stored under ``key`` (``RunRecord.machine``), or None."""
        with self._read() as conn:
            return self._machine_row(conn, key)

    def _machine_row(self, conn, key: Optional[str]) -> Optional[Machine]:
        if key is None:
            return None
        if not isinstance(key, str):
            raise StoreError(f"store {self.path}: a machine key is {fields.show(key)}, not "
                             f"the text of a machines row")
        row = conn.execute("SELECT record FROM machines WHERE key = ?", (key,)).fetchone()
        return rec.machine_from_json(row[0], rec.reader(self.path, "machines", repr(key))) \
            if row else None

    def _machine_key(self, conn, machine: Optional[Machine]) -> Optional[str]:
        """The key of ``machine``, its record stored on first use; None stays None."""
        if machine is None:
            return None
        if not isinstance(machine, Machine):
            raise McapError(f"a run's machine must be a mcap.core.machine.Machine, got "
                            f"{type(machine).__name__}")
        key = machine.key()
        conn.execute("INSERT OR IGNORE INTO machines (key, record, created) VALUES (?, ?, ?)",
                     (key, rec.machine_to_json(machine), time.time()))
        return key

    def _insert_run(self, conn, study: Study, run: Run, kind: str, job: Optional[int],
                    created: float, machine: Optional[str] = None) -> int:
        check_run(run, study, kind)
        values = (study.id, job, kind, *rec.run_values(run), created, machine,
                  int(run.composed), rec.times_to_json(run.times), int(run.estimated))
        _readable(lambda: rec.run_record_from_row((0, *values), self.path,
                                                  study.model.num_layers), "run", run.balance)
        cur = conn.execute(
            "INSERT INTO runs (study_id, job_id, kind, balance, status, peaks, seconds, "
            "samples_per_second, error, breakdown, created, machine, composed, times, "
            "estimated) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", values)
        return cur.lastrowid

    def _reuse_or_insert(self, conn, study: Study, runs: Sequence[Run], kind: str,
                         machine: Optional[str]) -> list[int]:
        """Ids for these runs: an identical run already stored (recorded as it finished)
        on the same machine is linked rather than copied, so saving a profile does not
        duplicate its runs."""
        ids, used, now = [], set(), time.time()
        for run in runs:
            check_run(run, study, kind)
            values = rec.run_values(run)
            found = conn.execute(
                "SELECT id FROM runs WHERE study_id = ? AND balance = ? AND status = ? "
                "AND peaks IS ? AND seconds = ? AND samples_per_second IS ? AND error IS ? "
                "AND breakdown IS ? AND machine IS ? AND composed = ? AND times IS ? "
                "AND estimated = ? ORDER BY id",
                (study.id, *values, machine, int(run.composed), rec.times_to_json(run.times),
                 int(run.estimated))).fetchall()
            match = next((i for (i,) in found if i not in used), None)
            if match is None:
                match = self._insert_run(conn, study, run, kind, None, now, machine)
            used.add(match)
            ids.append(match)
        return ids

    # --- profiles and sweeps ----------------------------------------------------------

    def save_profile(self, profile: Profile, name: Optional[str] = None) -> int:
        """Store a profile (statistics and runs) in one transaction; returns its id.

        A merged profile (``mcap.core.capture.merging``, ``profile --merge-to``) is kept in the
        study of its merged model, but its runs are the real model's runs, measured and
        recorded in the real model's study as they finished: they are linked there, over
        the real layers, not copied into the merged study (:meth:`_merged_runs_home`)."""
        stats = profile.stats
        n = profile.model.num_layers
        if len(stats.mem_isolated) != n or len(stats.mem_added) != n:
            raise McapError(f"profile of {profile.model.spec!r} has {len(stats.mem_isolated)} "
                            f"mem_isolated and {len(stats.mem_added)} mem_added values but "
                            f"the model has {n} layers")
        with self._write() as conn:
            study = self._get_or_create_study(conn, profile.model, profile.setup)
            machine = self._machine_key(conn, profile.machine)
            home, runs = self._merged_runs_home(conn, profile) or (study, profile.runs)
            run_ids = self._reuse_or_insert(conn, home, runs, "profile", machine)
            cur = conn.execute(
                "INSERT INTO profiles (study_id, name, mem_isolated, mem_added, extra, created, "
                "machine) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (study.id, name, rec.dumps(list(stats.mem_isolated)),
                 rec.dumps(list(stats.mem_added)), rec.profile_extra_to_json(profile),
                 time.time(), machine))
            conn.executemany("INSERT INTO profile_runs (profile_id, position, run_id) "
                             "VALUES (?, ?, ?)",
                             [(cur.lastrowid, i, r) for i, r in enumerate(run_ids)])
            return cur.lastrowid

    def load_profile(self, profile_id: int) -> Profile:
        with self._read() as conn:
            row = conn.execute("SELECT study_id, mem_isolated, mem_added, extra, machine "
                               "FROM profiles WHERE id = ?", (int(profile_id),)).fetchone()
            if row is None:
                raise McapError(f"store {self.path} has no profile {profile_id}")
            r = rec.reader(self.path, "profiles", int(profile_id))
            study = self._study_row(conn, rec.row_id(row[0], r, "study_id"))
            runs = self._linked_runs(conn, "profile_runs", "profile_id", profile_id)
            machine = self._machine_row(conn, row[4])
        stats = fields.stats(fields.loads(row[1], r, "mem_isolated"),
                             fields.loads(row[2], r, "mem_added"), r, study.model.num_layers)
        extra, variants, press = rec.profile_extra_from_json(row[3], study.model.num_layers, r)
        profile = Profile(study.model, study.setup, stats, runs, extra, machine=machine,
                          variants=variants, press=press)
        sizes = merging.sizes_of(profile)
        if sizes is not None and any(sum(r.balance) != len(sizes) for r in runs):
            # linked from the real model's study (save_profile): back over merged layers
            try:
                runs = tuple(r if sum(r.balance) == len(sizes) else
                             dataclasses.replace(r, balance=merging.contract(r.balance, sizes))
                             for r in runs)
            except McapError as exc:
                raise StoreError(f"store {self.path}: profile {profile_id}'s runs do not fit "
                                 f"its merged layers: {exc}") from None
            profile = dataclasses.replace(profile, runs=runs)
        return profile

    def _merged_runs_home(self, conn, profile: Profile) -> Optional[tuple[Study, tuple[Run, ...]]]:
        """Where a merged profile's runs are stored: (the real model's study, the runs over
        its real layers), or None for an unmerged profile.

        The profiling runs of a merged profile are measured as partitionings of the real
        layers and recorded in the real model's study (``workflow.profiling.profile``), where
        resuming, reuse and every listing of runs find them; the merged model's study holds
        the profile only (its model: nothing builds a merged spec). Without the real study in
        this store (a merged profile saved elsewhere), or when its layers do not merge into
        the profile's, the runs stay with the profile's study as before."""
        sizes = merging.sizes_of(profile)
        if sizes is None:
            return None
        row = conn.execute(f"SELECT {rec.STUDY_COLUMNS} FROM studies WHERE key = ?",
                           (rec.study_key(merging.real_spec(profile), profile.setup),)).fetchone()
        if row is None:
            return None
        real = rec.study_from_row(row)
        try:
            if merging.merged_model(real.model, sizes) != profile.model:
                return None
            runs = tuple(dataclasses.replace(r, balance=merging.expand(r.balance, sizes))
                         for r in profile.runs)
        except McapError:
            return None
        return real, runs

    def list_profiles(self) -> tuple[Summary, ...]:
        return self._summaries("profiles", "profile_runs", "profile_id")

    def save_sweep(self, sweep: Sweep, name: Optional[str] = None) -> int:
        """Store a sweep (many measured partitionings) in one transaction; returns its id."""
        with self._write() as conn:
            study = self._get_or_create_study(conn, sweep.model, sweep.setup)
            machine = self._machine_key(conn, sweep.machine)
            run_ids = self._reuse_or_insert(conn, study, sweep.runs, "sweep", machine)
            cur = conn.execute("INSERT INTO sweeps (study_id, name, extra, created, machine) "
                               "VALUES (?, ?, ?, ?, ?)",
                               (study.id, name, rec.extra_to_json(sweep.extra), time.time(),
                                machine))
            conn.executemany("INSERT INTO sweep_runs (sweep_id, position, run_id) "
                             "VALUES (?, ?, ?)",
                             [(cur.lastrowid, i, r) for i, r in enumerate(run_ids)])
            return cur.lastrowid

    def load_sweep(self, sweep_id: int) -> Sweep:
        with self._read() as conn:
            row = conn.execute("SELECT study_id, extra, machine FROM sweeps WHERE id = ?",
                               (int(sweep_id),)).fetchone()
            if row is None:
                raise McapError(f"store {self.path} has no sweep {sweep_id}")
            study = self._study_row(conn, rec.row_id(
                row[0], rec.reader(self.path, "sweeps", int(sweep_id)), "study_id"))
            runs = self._linked_runs(conn, "sweep_runs", "sweep_id", sweep_id)
            machine = self._machine_row(conn, row[2])
        return Sweep(study.model, study.setup, runs,
                     rec.extra_from_json(row[1], rec.reader(self.path, "sweeps", int(sweep_id))),
                     machine=machine)

    def list_sweeps(self) -> tuple[Summary, ...]:
        return self._summaries("sweeps", "sweep_runs", "sweep_id")

    def _linked_runs(self, conn, link: str, column: str, owner: int) -> tuple[Run, ...]:
        cols = ", ".join("r." + c.strip() for c in rec.RUN_COLUMNS.split(","))
        rows = conn.execute(f"SELECT {cols} FROM {link} l JOIN runs r ON r.id = l.run_id "
                            f"WHERE l.{column} = ? ORDER BY l.position", (int(owner),)).fetchall()
        layers = self._layer_counts(conn, {row[1] for row in rows})
        return tuple(rec.run_record_from_row(row, self.path, layers.get(row[1])).run
                     for row in rows)

    def _summaries(self, table: str, link: str, column: str) -> tuple[Summary, ...]:
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT t.id, t.name, s.spec, s.setup, "
                f"(SELECT COUNT(*) FROM {link} l WHERE l.{column} = t.id), t.created, s.id, "
                f"m.record FROM {table} t JOIN studies s ON s.id = t.study_id "
                f"LEFT JOIN machines m ON m.key = t.machine ORDER BY t.id").fetchall()
        out = []
        for i, name, spec, setup, n, created, sid, machine in rows:
            r = rec.reader(self.path, table, i)
            out.append(Summary(i, r.str_(name, "name", nullable=True), r.str_(spec, "spec"),
                               rec.setup_from_json(setup, rec.reader(self.path, "studies", sid)),
                               n, rec.when(created, r, "created"), sid,
                               rec.machine_from_json(machine, rec.reader(self.path, table, i))))
        return tuple(out)

    # --- jobs -------------------------------------------------------------------------

    def create_job(self, kind: str, argv: Sequence[str], total: int, *,
                   study: Optional[StudyRef] = None) -> int:
        """A job the dashboard is about to launch; status "pending" until it reports."""
        if not isinstance(kind, str) or not kind:
            raise McapError(f"a job needs a kind such as 'profile', got {kind!r}")
        if not isinstance(total, int) or total < 0:
            raise McapError(f"a job's total number of runs must be an int >= 0, got {total!r}")
        argv = [str(a) for a in argv]
        now = time.time()
        with self._write() as conn:
            study_id = None if study is None else self._study_row(conn, study).id
            cur = conn.execute(
                "INSERT INTO jobs (kind, argv, total, status, study_id, created, updated) "
                "VALUES (?, ?, ?, 'pending', ?, ?, ?)",
                (kind, rec.dumps(argv), total, study_id, now, now))
            return cur.lastrowid

    def update_job(self, job_id: int, *, done=_UNSET, current=_UNSET, status=_UNSET,
                   error=_UNSET, pid=_UNSET, total=_UNSET, study=_UNSET) -> Job:
        """Change the given fields (None clears ``current``, ``error``, ``pid``).

        A finished job (done, failed, cancelled) keeps its status: a child killed by the
        cancel button may still report "running" on its way out, and must not undo it.
        """
        if status is not _UNSET and status not in rec.JOB_STATUSES[1:]:
            raise McapError(f"job status must be one of {', '.join(rec.JOB_STATUSES[1:])}, "
                            f"got {status!r}")
        for label, value in (("done", done), ("total", total)):
            if value is not _UNSET and (not isinstance(value, int) or value < 0):
                raise McapError(f"job {label} must be an int >= 0, got {value!r}")
        changes = {}  # column -> new value
        if done is not _UNSET:
            changes["done"] = done
        if total is not _UNSET:
            changes["total"] = total
        if current is not _UNSET:
            if current is not None and (isinstance(current, (str, bytes)) or
                                        not all(is_int(n) for n in current)):
                raise McapError(f"job current must be a balance such as (3, 3, 5, 19), "
                                f"got {current!r}")
            changes["current"] = None if current is None else rec.balance_text(current)
        if error is not _UNSET:
            changes["error"] = None if error is None else str(error)
        if pid is not _UNSET:
            changes["pid"] = None if pid is None else int(pid)
        with self._write() as conn:
            job = self._job(conn, job_id)
            if status is not _UNSET and not job.finished:
                changes["status"] = status
            if study is not _UNSET:
                changes["study_id"] = None if study is None else self._study_row(conn, study).id
            changes["updated"] = time.time()
            assignments = ", ".join(f"{column} = ?" for column in changes)
            conn.execute(f"UPDATE jobs SET {assignments} WHERE id = ?",
                         (*changes.values(), job.id))
            return self._job(conn, job.id)

    def job(self, job_id: int) -> Job:
        with self._read() as conn:
            return self._job(conn, job_id)

    def list_jobs(self) -> tuple[Job, ...]:
        """All jobs, newest first."""
        with self._read() as conn:
            rows = conn.execute(f"SELECT {rec.JOB_COLUMNS} FROM jobs ORDER BY id DESC").fetchall()
        return tuple(rec.job_from_row(row, self.path) for row in rows)

    def job_runs(self, job_id: int) -> tuple[RunRecord, ...]:
        """The runs a job has recorded so far, oldest first (the Profile page's table)."""
        return self.run_records(job=job_id)

    def _job(self, conn, job_id: int) -> Job:
        row = conn.execute(f"SELECT {rec.JOB_COLUMNS} FROM jobs WHERE id = ?",
                           (int(job_id),)).fetchone()
        if row is None:
            raise McapError(f"store {self.path} has no job {job_id}")
        return rec.job_from_row(row, self.path)


def _readable(decode, what: str, balance) -> None:
    """Refuse (McapError) a record the store could not read back: every row is read with
    the checks files pass (``mcap.store.records``), so what is written must pass them."""
    try:
        decode()
    except StoreError as exc:
        found = str(exc).split(": ", 2)[-1]
        raise McapError(f"{what} of balance {list(balance)} cannot be stored: {found}") from None


def open_store(path: Union[str, os.PathLike, None] = None, *,
               read_only: Optional[bool] = False) -> Store:
    """``Store(path, read_only=...)``; ``path=None`` is ``$MCAP_STORE`` or
    ``./.mcap/store.sqlite``."""
    return Store(path, read_only=read_only)
