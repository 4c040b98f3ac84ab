"""Studies, measured runs, stages run alone and machine fingerprints: what ``Store`` records
as each run finishes (``record_run``, ``keep_run``, ``record_stage``) and finds again
(``find_run``, ``runs``, ``stage_runs``), and the recovery file's lines coming back in.

Nothing measured is ever lost: ``record_run`` is called as each run finishes, inside its
own transaction, so a profile killed half-way keeps every run it finished and the
next ``python -m mcap profile`` finds them with ``find_run`` instead of measuring again.
"""
from __future__ import annotations

import time
from typing import Optional, Sequence, Union

from mcap.core import fields
from mcap.core.errors import McapError, StoreError
from mcap.core.machine import Machine
from mcap.core.types import ModelInfo, Run, Setup, StageRun
from mcap.store import records as rec
from mcap.store import recovery
from mcap.store.checks import check_run, check_stage_run, layer_diff
from mcap.store.records import RunRecord, Study, StudySummary

StudyRef = Union[Study, int]


class Runs:
    """The studies, runs, stage runs and machines of a ``Store`` (a mixin over
    ``mcap.store.connection.Connection``)."""

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


def _readable(decode, what: str, balance) -> None:
    """Refuse (McapError) a record the store could not read back: every row is read with
    the checks files pass (``mcap.store.records``), so what is written must pass them."""
    try:
        decode()
    except StoreError as exc:
        found = str(exc).split(": ", 2)[-1]
        raise McapError(f"{what} of balance {list(balance)} cannot be stored: {found}") from None

