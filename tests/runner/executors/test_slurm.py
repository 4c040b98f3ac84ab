"""Executor ``slurm`` on a real one-node Slurm cluster on 127.0.0.1 (``bin/slurm-local``;
issue 42): submitit's job arrays read the local sweep's peaks to the byte, composed and
direct; a job cancelled mid-sweep is sent again and nothing is lost or stored twice; one
that fails for good is stored failed with its node and error; a driver killed mid-sweep
adopts its array's jobs when run again; tasks that cannot be scheduled end the command
with exit 2 naming why. One cluster per session, always stopped."""
from __future__ import annotations

import collections
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from tests.runner.executors import clusters

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("slurm")]


def _slurm(cluster, store, out, *more, **extra):
    return clusters.mcap(clusters.sweep_args(store, out, "--executor", "slurm", *more),
                         **cluster.env(), **extra)


def _running(cluster) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-t", "RUNNING", "-o", "%i"],
                         env=clusters.env(**cluster.env()), capture_output=True, text=True)
    return out.stdout.split()


def _cancel_one_starting(cluster, proc, started=None) -> str:
    """Kill one array task mid-measurement: the first array task to start running after
    ``started()`` holds (its process is still importing torch: seconds from any result)."""
    end = time.monotonic() + 300
    while started is not None and not started() and time.monotonic() < end:
        assert proc.poll() is None, "the command ended first"
        time.sleep(0.1)
    seen = set(_running(cluster))
    while time.monotonic() < end and proc.poll() is None:
        new = [j for j in _running(cluster) if j not in seen and "_" in j]  # not the probe
        if new:
            subprocess.run(["scancel", "--signal=KILL", "--full", new[0]],
                           env=clusters.env(**cluster.env()), check=True)
            return new[0]
        time.sleep(0.05)
    raise AssertionError("no measurement job was seen starting")


def test_a_sweep_as_job_arrays_with_a_job_killed_equals_the_local_one(slurm_cluster,
                                                                      local_sweep, tmp_path):
    """Composed from stages alone, one array task killed mid-task: sent again, every stage
    key stored once, the local sweep's peaks to the byte, no task file left behind."""
    folder = tmp_path / "jobs"
    proc = clusters.popen(clusters.sweep_args(tmp_path / "k.db", tmp_path / "k.sweep.json",
                                              "--executor", "slurm", "--slurm-folder",
                                              str(folder), "--slurm-array-parallelism", "2"),
                          log=tmp_path / "k.log", **slurm_cluster.env())
    try:
        _cancel_one_starting(slurm_cluster, proc,
                             lambda: len(clusters.stage_rows(tmp_path / "k.db")) >= 1
                             if (tmp_path / "k.db").exists() else False)
        assert proc.wait(timeout=600) == 0, (tmp_path / "k.log").read_text()[-3000:]
    finally:
        clusters.kill_tree(proc)
    log = (tmp_path / "k.log").read_text()
    assert "1 retried" in log, log[-2000:]
    rows = clusters.stage_rows(tmp_path / "k.db")
    keys = collections.Counter(r[:3] for r in rows)
    assert len(keys) == clusters.KEYS and set(keys.values()) == {1} and \
        all(r[3] == "ok" for r in rows)
    assert clusters.done_by_node(log) == {os.uname().nodename: clusters.KEYS}
    assert clusters.peaks_of(tmp_path / "k.sweep.json") == local_sweep
    assert not list(folder.iterdir()), "the driver leaves no task file behind"


def test_a_direct_sweep_whose_driver_was_killed_adopts_its_jobs_and_equals_the_local_one(
        slurm_cluster, local_sweep, tmp_path):
    """Every partitioning measured whole (--no-reuse), the driver killed half-way: run
    again, it adopts the jobs its array still owes instead of sending them again."""
    args = clusters.sweep_args(tmp_path / "d.db", tmp_path / "d.sweep.json", "--no-reuse",
                               "--executor", "slurm", "--slurm-folder", str(tmp_path / "jobs"))
    proc = clusters.popen(args, log=tmp_path / "d1.log", **slurm_cluster.env())
    try:
        clusters.wait_for_rows(tmp_path / "d.db", 1, proc)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its array goes on in Slurm
        proc.wait()
    finally:
        clusters.kill_tree(proc)
    before = len(clusters.stage_rows(tmp_path / "d.db"))
    assert before < 2 * clusters.BALANCES
    again = clusters.mcap(args, **slurm_cluster.env())
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"adopted {2 * clusters.BALANCES - before} task(s)" in again.stderr, \
        again.stderr[-2000:]
    assert clusters.peaks_of(tmp_path / "d.sweep.json") == local_sweep
    with sqlite3.connect(tmp_path / "d.db") as conn:
        jobs = conn.execute("SELECT balance, stage FROM stage_runs").fetchall()
    assert len(jobs) == 2 * clusters.BALANCES and len(set(jobs)) == len(jobs)  # none twice
    assert not list((tmp_path / "jobs").iterdir())  # every file of both drivers is gone


def test_results_a_killed_driver_stored_but_left_are_tidied_by_the_next_one(tmp_path,
                                                                           monkeypatch):
    """A driver killed between storing a result and taking its files away (``forget``) left
    the job's folder and ledger line: the next driver of the same model and setup does not
    ask for that task (it is stored), so it had stayed for good (the fresh-clone suite's
    killed-driver test found ``jobs/8_1`` and the ledger). Now that driver tidies them at
    close; a line of a driver still running, of another model or setup, or of an older
    ledger without its driver stays."""
    import json
    import socket

    from mcap.core.types import Setup
    from mcap.runner.executors import slurm

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    backend = slurm.SlurmBackend({"slurm_folder": str(tmp_path / "jobs")}, "toy:layers=4",
                                 Setup(stages=2, batch_size=4, chunks=2))
    lines = {"8_1": (backend._sweep(), f"{host}:{dead.pid}"),  # the killed driver's: tidied
             "8_2": (backend._sweep(), f"{host}:{os.getpid()}"),  # a running driver's
             "9_0": ("another model or setup", f"{host}:{dead.pid}"),
             "7_0": (None, None)}  # an older ledger's line
    (tmp_path / "jobs").mkdir()
    with open(tmp_path / "jobs" / "ledger.jsonl", "w") as fh:
        for job, (sweep, owner) in lines.items():
            (tmp_path / "jobs" / job).mkdir()
            (tmp_path / "jobs" / job / f"{job}_0_result.pkl").write_bytes(b"result")
            entry = {"content": f"c{job}", "job": job}
            entry.update({"sweep": sweep, "owner": owner} if sweep else {})
            fh.write(json.dumps(entry) + "\n")
        # a hostile line: its job id would name a folder outside; never read, never deleted
        (tmp_path / "outside" / "0").mkdir(parents=True)
        fh.write(json.dumps({"content": "x", "job": "../outside", "sweep": backend._sweep(),
                             "owner": f"{host}:{dead.pid}"}) + "\n")
    monkeypatch.setattr(slurm, "_squeue", lambda ids: {})  # ended, out of squeue's memory
    backend.submit([])  # every task of this driver was in its store
    backend.close()
    left = sorted(p.name for p in (tmp_path / "jobs").iterdir())
    assert left == ["7_0", "8_2", "9_0", "ledger.jsonl"], left
    kept = [json.loads(line)["job"] for line in
            (tmp_path / "jobs" / "ledger.jsonl").read_text().splitlines()]
    assert sorted(kept) == ["../outside", "7_0", "8_2", "9_0"]
    assert (tmp_path / "outside" / "0").is_dir()


def test_a_task_that_fails_for_good_is_stored_failed_with_its_node_and_error(slurm_cluster,
                                                                             tmp_path):
    store = tmp_path / "f.db"
    proc = clusters.popen(["measure", "--model", clusters.MODEL, "--balance", "2,1",
                           *clusters.SETUP[2:], "--store", str(store), "--executor", "slurm",
                           "--retries", "0", "--slurm-folder", str(tmp_path / "jobs")],
                          log=tmp_path / "f.log", **slurm_cluster.env())
    try:
        job = _cancel_one_starting(slurm_cluster, proc)
        assert proc.wait(timeout=600) == 1, (tmp_path / "f.log").read_text()[-3000:]
    finally:
        clusters.kill_tree(proc)
    with sqlite3.connect(store) as conn:
        (status, error), = conn.execute("SELECT status, error FROM runs").fetchall()
    node = os.uname().nodename
    assert status == "failed" and f"on node {node}: Slurm job {job} ended CANCELLED" in error
    assert "(tried 1 time)" in error, error


def test_bad_input_and_unschedulable_tasks_exit_2_naming_why(slurm_cluster, tmp_path):
    late = _slurm(slurm_cluster, tmp_path / "q.db", tmp_path / "q.sweep.json",
                  "--slurm-partition", "short", "--slurm-time", "5", "--queue-timeout", "0.1",
                  "--slurm-folder", str(tmp_path / "jobs"))
    assert late.returncode == 2 and "Traceback" not in late.stderr, late.stderr[-2000:]
    assert "executor slurm: 1 task(s) waited 0.1 min in the queue and none started" in \
        late.stderr and "PartitionTimeLimit" in late.stderr, late.stderr[-2000:]
    gpu = _slurm(slurm_cluster, tmp_path / "g.db", tmp_path / "g.sweep.json",
                 "--slurm-gpus-per-task", "1", "--slurm-folder", str(tmp_path / "jobs"))
    assert gpu.returncode == 2 and "executor slurm: each task asks 1 GPU" in gpu.stderr
    assert "no GPU resources" in gpu.stderr
    part = _slurm(slurm_cluster, tmp_path / "p.db", tmp_path / "p.sweep.json",
                  "--slurm-partition", "nosuch")
    assert part.returncode == 2 and "no partition nosuch" in part.stderr
