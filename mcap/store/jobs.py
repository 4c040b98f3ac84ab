"""The dashboard's jobs in the store: created before a child process starts, updated as it
reports, never taken back from a finished status (``Store.create_job``, ``update_job``)."""
from __future__ import annotations

import time
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.store import records as rec
from mcap.store.checks import is_int
from mcap.store.records import Job, RunRecord
from mcap.store.runs import StudyRef

_UNSET = object()  # "leave this job field as it is" (None means "clear it")


class Jobs:
    """The jobs of a ``Store`` (a mixin over ``Connection`` and ``Runs``)."""

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

