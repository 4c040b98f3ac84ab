"""mcap.app.jobs: real child processes of ``python -m mcap``, followed through the store."""
import time

import pytest

from mcap.app import jobs
from mcap.core.errors import McapError
from mcap.store import open_store

TINY = ["--model", "gpt:layers=1,hidden=32,vocab=64,seq=16", "--batch-size", "4", "--chunks", "2"]


def wait_until(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"not reached within {timeout} s")


def test_bad_command_fails_with_the_cli_message(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    job = jobs.launch(store, "profile", ["--model", "nosuchmodel", "--stages", "2",
                                         "--out", str(tmp_path / "p.json")])
    assert job.pid is not None and job.argv[0] == "profile"
    assert jobs.wait(store, job.id, 60) == 2
    p = jobs.progress(store, job.id)
    assert p.job.status == "failed" and not p.alive
    assert "exit code 2" in p.job.error and "nosuchmodel" in p.job.error
    assert jobs.active_jobs(store) == ()


def test_unknown_kind_is_refused(tmp_path):
    with pytest.raises(McapError, match="job kind 'train' is not one of profile, sweep, measure"):
        jobs.command("train", [], 1)


@pytest.mark.integration
def test_profile_job_records_its_runs_in_the_store(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    out = tmp_path / "p.json"
    job = jobs.launch(store, "profile", [*TINY, "--stages", "2", "--out", str(out)])
    assert jobs.wait(store, job.id, 240) == 0, jobs.tail_of(jobs.log_path(store, job.id))
    p = jobs.progress(store, job.id)
    assert p.job.status == "done" and p.job.done == p.job.total == 2
    assert [r.balance for r in p.runs] == [(1, 2), (2, 1)]
    assert all(r.status == "ok" and r.peak > 0 for r in p.runs)
    assert p.fraction == 1.0 and out.exists()
    assert len(store.list_profiles()) == 1


@pytest.mark.integration
def test_measure_job_reports_its_run_through_the_job(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    job = jobs.launch(store, "measure", [*TINY, "--balance", "2,1"])
    assert jobs.wait(store, job.id, 240) == 0, jobs.tail_of(jobs.log_path(store, job.id))
    p = jobs.progress(store, job.id)
    assert p.job.status == "done" and p.job.done == p.job.total == 1
    assert [r.balance for r in p.runs] == [(2, 1)]
    assert p.runs[0].status == "ok" and p.runs[0].peak > 0


@pytest.mark.integration
def test_cancel_stops_the_child_and_keeps_finished_runs(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    job = jobs.launch(store, "sweep", ["--model", "gpt:layers=4,hidden=32,vocab=64,seq=16",
                                       "--batch-size", "4", "--chunks", "2", "--stages", "2",
                                       "--out", str(tmp_path / "s.json")])
    wait_until(lambda: store.job(job.id).status == "running", 120)
    assert jobs.active_jobs(store, "sweep")[0].id == job.id
    cancelled = jobs.cancel(store, job.id)
    assert cancelled.status == "cancelled"
    assert jobs.wait(store, job.id, 60) is not None
    p = jobs.progress(store, job.id)
    assert p.job.status == "cancelled" and not p.alive
    assert len(p.runs) < 5  # gpt with 4 blocks has 6 layers: 5 two-stage partitionings
    assert jobs.cancel(store, job.id).status == "cancelled"  # a second cancel changes nothing


# --- the files a job writes: never through a link (issue 38, item 1) ----------------------

VICTIM = b"secret=hunter2\n"


def test_a_log_linked_to_another_file_is_refused_and_never_shown(tmp_path):
    """A copied store whose ``jobs/`` holds a link where job 1's log goes: the launch is
    refused before the child starts (the victim is not truncated), and a job record of the
    store never shows the linked file's tail on a page."""
    store = open_store(tmp_path / "s.sqlite")
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    log = jobs.log_path(store, 1)
    log.parent.mkdir()
    log.symlink_to(victim)
    with pytest.raises(McapError, match="job's log .* is a symbolic link"):
        jobs.launch(store, "profile", ["--model", "nosuchmodel", "--stages", "2",
                                       "--out", str(tmp_path / "p.json")])
    assert victim.read_bytes() == VICTIM
    assert store.job(1).status == "failed" and "symbolic link" in store.job(1).error
    assert jobs.tail_of(log) == "" and jobs.progress(store, 1).log_tail == ""


@pytest.mark.parametrize("folder", ["jobs", "out"])
def test_a_linked_jobs_or_out_folder_is_refused(tmp_path, folder):
    store = open_store(tmp_path / "s.sqlite")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / folder).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(McapError, match="symbolic link"):
        if folder == "out":
            jobs.output_path(store, "sweep")
        else:
            jobs.launch(store, "profile", ["--model", "nosuchmodel", "--stages", "2"])
    assert list(elsewhere.iterdir()) == [] and store.list_jobs() == ()
def _state(pid: int):
    """A process's state letter from /proc ("Z" for a zombie), None once it is gone."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


@pytest.mark.integration
def test_a_cancelled_job_is_reaped_without_anyone_polling_it(tmp_path):
    """Issue 38, item 8: a cancelled profiling job stayed a <defunct> child of the server for
    minutes, because once its status is cancelled no page asks about it again. The child is
    reaped as it ends, whoever looks."""
    store = open_store(tmp_path / "s.sqlite")
    job = jobs.launch(store, "sweep", ["--model", "gpt:layers=4,hidden=32,vocab=64,seq=16",
                                       "--batch-size", "4", "--chunks", "2", "--stages", "2",
                                       "--out", str(tmp_path / "s.json")])
    wait_until(lambda: store.job(job.id).status == "running", 120)
    jobs.cancel(store, job.id)
    # no poll(), wait() or progress() from here on: only /proc is read
    wait_until(lambda: _state(job.pid) is None, 60)
    assert jobs._CHILDREN[job.pid].returncode is not None
