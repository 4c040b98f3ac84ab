"""Jobs (issue 12): a pid reused by another process is never signalled, the job is marked
lost; job logs and outputs never collide across stores in one folder or within a second."""
from __future__ import annotations

import subprocess
import sys
import time

from mcap.app import jobs
from mcap.store import Store


def _stranger():
    """A process that is not an mcap job (stands for a pid the OS gave to someone else)."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def test_cancel_never_signals_a_reused_pid(tmp_path):
    stranger = _stranger()
    try:
        with Store(tmp_path / "store.sqlite") as s:
            job_id = s.create_job("sweep", ["sweep", "--model", "vgg11"], 10)
            s.update_job(job_id, pid=stranger.pid, status="running")
            job = jobs.cancel(s, job_id)
            assert job.status == "failed" and job.error.startswith("lost:"), job
            assert "another program" in job.error
        time.sleep(0.2)
        assert stranger.poll() is None  # still running: never signalled
    finally:
        stranger.kill()
        stranger.wait()


def test_reconcile_marks_a_reused_pid_lost(tmp_path):
    stranger = _stranger()
    try:
        with Store(tmp_path / "store.sqlite") as s:
            job_id = s.create_job("profile", ["profile"], 3)
            s.update_job(job_id, pid=stranger.pid, status="running")
            job = jobs.reconcile(s, s.job(job_id))
            assert job.status == "failed" and "lost" in job.error
            assert jobs.active_jobs(s) == ()
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_identity_checks_the_start_time(tmp_path):
    """Same command line, but started long after the job was recorded: a reused pid."""
    with Store(tmp_path / "store.sqlite") as s:
        job_id = s.create_job("sweep", ["sweep"], 1)
        job = s.job(job_id)
    me = jobs.process_argv(__import__("os").getpid())
    assert me and jobs.process_start(__import__("os").getpid()) <= time.time()
    # pretend the job was recorded an hour before this process started
    import dataclasses
    old = dataclasses.replace(job, pid=__import__("os").getpid(), created=time.time() - 3600,
                              kind=me[2] if len(me) > 2 else "x")
    ours, why = jobs.identity(old)
    assert not ours and why


def test_job_logs_and_outputs_never_collide(tmp_path):
    with Store(tmp_path / "a.sqlite") as a, Store(tmp_path / "b.sqlite") as b:
        assert jobs.log_path(a, 1) != jobs.log_path(b, 1)
        outs = {jobs.output_path(a, "sweep") for _ in range(200)}
        outs |= {jobs.output_path(b, "sweep") for _ in range(200)}
        assert len(outs) == 400  # same second, same folder, two stores: all distinct
        assert all(p.name.endswith(".sweep.json") for p in outs)
