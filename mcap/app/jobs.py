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
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.files import owned
from mcap.store import Job, Store
from mcap.core.types import Run

JOB_KINDS = ("profile", "sweep", "measure")
REPO_ROOT = Path(__file__).resolve().parents[2]

# Children this server process started, so it can read their exit codes. Each is reaped
# the moment it ends by a daemon thread of its own (``_reap``): a cancelled job is no longer
# polled by any page, and stayed ``<defunct>`` under the server until it stopped (issue 38,
# item 8). Jobs started by another process are followed through their pid alone.
_CHILDREN: dict[int, subprocess.Popen] = {}


def _reap(child: subprocess.Popen) -> None:
    """Wait for ``child`` in a daemon thread (never blocks the server's exit), so its exit
    status is collected as it ends: no zombie, and ``returncode`` is there for reconcile."""
    threading.Thread(target=child.wait, daemon=True, name=f"mcap-reap-{child.pid}").start()


@dataclass(frozen=True)
class JobProgress:
    """What the Profile page shows: the job record and the runs it has recorded so far."""
    job: Job
    runs: tuple[Run, ...]
    alive: bool
    log_tail: str

    @property
    def tasks(self) -> Optional[str]:
        """The executor's tasks by node as the job's progress line last said them (``tasks:
        5 done (n1 3, n2 2), 2 running (n1 1, n2 1), 5 queued``; issue 42), or None."""
        import re
        found = re.findall(r"\[(tasks: [^\]\n]*)\]", self.log_tail)
        return found[-1] if found else None

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
    """``jobs/<store file>-<id>.log`` beside the store: two stores in one folder both have
    a job 1, and each keeps its own log."""
    return Path(store.path).parent / "jobs" / f"{Path(store.path).name}-{job_id}.log"


def output_path(store: Store, kind: str) -> Path:
    """Where a dashboard job writes its JSON: ``out/`` beside the store, named by the store,
    the kind, the time and a random tag, so jobs started in the same second, or for two
    stores in one folder, never write the same file."""
    import time
    import uuid
    stamp = time.strftime("%Y%m%d-%H%M%S")
    name = f"{Path(store.path).stem}-{kind}-{stamp}-{uuid.uuid4().hex[:8]}.{kind}.json"
    folder = owned.folder(Path(store.path).parent / "out", "the dashboard's output folder")
    return folder / name


def check_model_args(args: Sequence[str]) -> None:
    """Refuse a ``--model`` that names user code unless it is a ``TrustedSpec``: the
    dashboard creates one only after the person confirmed that module and function.
    A spec taken from a file (the Predict page's measure button on a profile of a user
    model) is data, and the child's command line would otherwise make it trusted."""
    from mcap.models.spec import check_trusted
    args = list(args)
    for i, a in enumerate(args):
        if a == "--model" and i + 1 < len(args):
            check_trusted(args[i + 1], "enter the spec on the Profile page and confirm running "
                                       "its module and function, or type it on the command line")
        elif isinstance(a, str) and a.startswith("--model="):
            check_trusted(a.split("=", 1)[1])


def launch(store: Store, kind: str, args: Sequence[str], total: int = 0) -> Job:
    """Record a job, start its child detached, note its pid; returns the job as stored.

    The child finds the same store through ``MCAP_STORE``, and reports ``running``, runs
    done and the current balance itself; ``total`` is a first estimate it may correct.
    A ``--model`` naming user code must be a ``TrustedSpec`` (``check_model_args``).
    """
    check_model_args(args)
    owned.folder(log_path(store, 0).parent, "the jobs folder")  # a link there: refused
    job_id = store.create_job(kind, [kind, *[str(a) for a in args]], total)
    argv = command(kind, args, job_id)
    log = log_path(store, job_id)
    env = dict(os.environ)
    env["MCAP_STORE"] = str(Path(store.path).resolve())
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    try:  # never through a link planted where the log goes (issue 38)
        fd = owned.open_fd(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, "the job's log")
    except (OSError, McapError) as exc:
        store.update_job(job_id, status="failed", error=f"cannot write its log: {exc}")
        raise McapError(f"could not start job {job_id}: {exc}") from None
    with os.fdopen(fd, "wb") as out:
        try:
            child = subprocess.Popen(argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                                     stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            store.update_job(job_id, status="failed", error=f"could not start {argv[:4]}: {exc}")
            raise McapError(f"could not start job {job_id} ({' '.join(argv[3:5])}): {exc}") from exc
    _CHILDREN[child.pid] = child
    _reap(child)
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


# --- process identity: a pid alone may have been reused by an unrelated process ------------

# How long after its job record a child may have started (the record is written just
# before the child is spawned; a loaded machine can be slow to exec).
START_WINDOW_S = 30.0


def _boot_time() -> Optional[float]:
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("btime "):
                return float(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def process_start(pid: int) -> Optional[float]:
    """When process ``pid`` started (seconds since the epoch), from /proc/PID/stat field 22."""
    boot = _boot_time()
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(fields[19])  # field 22 overall; fields[0] is field 3 (state)
    except (OSError, ValueError, IndexError):
        return None
    if boot is None:
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def process_argv(pid: int) -> Optional[list[str]]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def identity(job: Job) -> tuple[bool, str]:
    """Whether the process now at ``job.pid`` is this job's child: its command line is
    ``-m mcap <kind> ... --job <id>`` and it started within START_WINDOW_S of the job's
    record. (False, why) when it is not, or when that cannot be verified."""
    child = _CHILDREN.get(job.pid)
    if child is not None:  # started by this process: the Popen object is the identity
        return True, ""
    argv = process_argv(job.pid)
    started = process_start(job.pid)
    if argv is None or started is None:
        return False, f"the identity of process {job.pid} cannot be read from /proc"
    want = ["-m", "mcap", job.kind]
    tail = ["--job", str(job.id)]
    if argv[1:4] != want or argv[-2:] != tail:
        return False, f"pid {job.pid} is now another program ({' '.join(argv[:4])[:120]})"
    if not job.created - 2.0 <= started <= job.created + START_WINDOW_S:
        return False, (f"pid {job.pid} started at {started:.0f}, not when job {job.id} was "
                       f"launched ({job.created:.0f}): the pid was reused")
    return True, ""


def _mark_lost(store: Store, job: Job, why: str) -> Job:
    """A job whose pid now belongs to another process: its child is gone; never signal."""
    return store.update_job(job.id, status="failed", current=None,
                            error=f"lost: {why}; its process is gone (finished runs are kept)")


def cancel(store: Store, job_id: int) -> Job:
    """SIGTERM to the child; status cancelled. Runs it finished stay in the store.

    The process at the recorded pid is signalled only when it is this job's child
    (``identity``: command line and start time); a pid reused by another process is
    never signalled, and the job is marked lost."""
    job = store.job(job_id)
    if job.finished:
        return job
    if job.pid is not None and is_alive(job.pid):
        ours, why = identity(job)
        if not ours:
            return _mark_lost(store, job, why)
        # Only the command itself: it turns SIGTERM into a clean stop that closes its stage
        # processes (mcap.workflow.measuring.sigterm_cancels) instead of recording a half-killed run.
        try:
            os.kill(job.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise McapError(f"cannot cancel job {job_id} (pid {job.pid}): {exc}") from exc
    return store.update_job(job_id, status="cancelled")


def reconcile(store: Store, job: Job) -> Job:
    """A job whose process has ended without reporting an end becomes done or failed; one
    whose pid now belongs to another process is marked lost."""
    if job.finished or job.pid is None:
        return job
    if is_alive(job.pid):
        ours, why = identity(job)
        return job if ours else _mark_lost(store, job, why)
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
    """The last ``limit`` bytes of a job's log as text; "" for a log that is missing, a link
    or has other names (a job record of a copied store must not show another file)."""
    try:
        with os.fdopen(owned.open_fd(path, os.O_RDONLY, "the job's log", owner=False),
                       "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(size - limit, 0))
            return fh.read().decode("utf-8", "replace")
    except (OSError, McapError):
        return ""
