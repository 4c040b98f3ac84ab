"""Long commands the dashboard starts: ``python -m mcap profile|sweep|measure ... --job ID``
as a detached child process that writes its runs and progress to the store.

Pages call this module, never ``subprocess`` (ARCHITECTURE.md, Dashboard). The child
runs in its own session (process group), so it outlives the page that started it, a page
switch or a browser reload; cancelling sends it SIGTERM, which it turns into a clean stop.
Progress is read back from the store (``Store.job`` and ``Store.job_runs``), so any page,
or a new server, can follow a job it did not start.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.store import Job, Store
from mcap.core.types import Run

JOB_KINDS = ("profile", "sweep", "measure")
REPO_ROOT = Path(__file__).resolve().parents[2]

# Children this server process started, so it can reap them (no zombies) and read their
# exit codes. Jobs started by another process are followed through their pid alone.
_CHILDREN: dict[int, subprocess.Popen] = {}


@dataclass(frozen=True)
class JobProgress:
    """What the Profile page shows: the job record and the runs it has recorded so far."""
    job: Job
    runs: tuple[Run, ...]
    alive: bool
    log_tail: str

    @property
    def fraction(self) -> float:
        """Runs done over total, in [0, 1]; 0 while the total is not known yet."""
        if self.job.total <= 0:
            return 1.0 if self.job.status == "done" else 0.0
        return min(self.job.done / self.job.total, 1.0)


def command(kind: str, args: Sequence[str], job_id: int) -> list[str]:
    """The child's argv: this interpreter, ``-m mcap``, the command and ``--job ID``."""
    if kind not in JOB_KINDS:
        raise McapError(f"job kind {kind!r} is not one of {', '.join(JOB_KINDS)}")
    return [sys.executable, "-m", "mcap", kind, *[str(a) for a in args], "--job", str(job_id)]


def log_path(store: Store, job_id: int) -> Path:
    return Path(store.path).parent / "jobs" / f"{job_id}.log"


def launch(store: Store, kind: str, args: Sequence[str], total: int = 0) -> Job:
    """Record a job, start its child detached, note its pid; returns the job as stored.

    The child finds the same store through ``MCAP_STORE``, and reports ``running``, runs
    done and the current balance itself; ``total`` is a first estimate it may correct.
    """
    job_id = store.create_job(kind, [kind, *[str(a) for a in args]], total)
    argv = command(kind, args, job_id)
    log = log_path(store, job_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["MCAP_STORE"] = str(Path(store.path).resolve())
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    with open(log, "wb") as out:
        try:
            child = subprocess.Popen(argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            store.update_job(job_id, status="failed", error=f"could not start {argv[:4]}: {exc}")
            raise McapError(f"could not start job {job_id} ({' '.join(argv[3:5])}): {exc}") from exc
    _CHILDREN[child.pid] = child
    return store.update_job(job_id, pid=child.pid)


def is_alive(pid: Optional[int]) -> bool:
    """Whether the process still runs (a zombie does not count)."""
    if pid is None:
        return False
    child = _CHILDREN.get(pid)
    if child is not None:
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie answers kill(0); /proc tells it apart (state "Z")
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def cancel(store: Store, job_id: int) -> Job:
    """SIGTERM to the child; status cancelled. Runs it finished stay in the store."""
    job = store.job(job_id)
    if job.finished:
        return job
    if job.pid is not None and is_alive(job.pid):
        # Only the command itself: it turns SIGTERM into a clean stop that closes its stage
        # processes (mcap.workflow.profiling.sigterm_cancels) instead of recording a half-killed run.
        try:
            os.kill(job.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise McapError(f"cannot cancel job {job_id} (pid {job.pid}): {exc}") from exc
    return store.update_job(job_id, status="cancelled")


def reconcile(store: Store, job: Job) -> Job:
    """A job whose process has ended without reporting an end becomes done or failed."""
    if job.finished or job.pid is None or is_alive(job.pid):
        return job
    child = _CHILDREN.get(job.pid)
    code = None if child is None else child.returncode
    # ``measure`` exits 1 when its one run was oom or failed: that run is the result, recorded.
    if code == 0 or (job.kind == "measure" and code == 1):
        return store.update_job(job.id, status="done", current=None)
    tail = tail_of(log_path(store, job.id))
    last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
    why = f"exit code {code}" if code is not None else "process ended"
    return store.update_job(job.id, status="failed", current=None, error=f"{why}: {last}")


def progress(store: Store, job_id: int) -> JobProgress:
    job = reconcile(store, store.job(job_id))
    runs = tuple(r.run for r in store.job_runs(job_id))
    return JobProgress(job, runs, is_alive(job.pid), tail_of(log_path(store, job_id)))


def active_jobs(store: Store, kind: Optional[str] = None) -> tuple[Job, ...]:
    """Unfinished jobs, newest first (a page opened later picks its job up again)."""
    out = []
    for job in store.list_jobs():
        if kind is not None and job.kind != kind:
            continue
        job = reconcile(store, job)
        if not job.finished:
            out.append(job)
    return tuple(out)


def wait(store: Store, job_id: int, timeout: float) -> Optional[int]:
    """Wait for a job's child that this process started; its exit code, or None if it still
    runs after ``timeout`` seconds (or was started by another process)."""
    child = _CHILDREN.get(store.job(job_id).pid)
    if child is None:
        return None
    try:
        return child.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def tail_of(path: Path, limit: int = 2000) -> str:
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - limit, 0))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""
