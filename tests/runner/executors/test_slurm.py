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


def test_a_sweep_as_job_arrays_equals_the_local_one_byte_for_byte(slurm_cluster, local_sweep,
                                                                   tmp_path):
    folder = tmp_path / "jobs"
    composed = _slurm(slurm_cluster, tmp_path / "a.db", tmp_path / "a.sweep.json",
                      "--slurm-folder", str(folder), "--slurm-array-parallelism", "2")
    assert composed.returncode == 0, composed.stderr[-3000:]
    assert clusters.peaks_of(tmp_path / "a.sweep.json") == local_sweep
    rows = clusters.stage_rows(tmp_path / "a.db")
    assert len(rows) == clusters.KEYS and {r[5] for r in rows} == {os.uname().nodename}
    assert not [p for p in folder.iterdir()], "the driver leaves no task files behind"
    direct = _slurm(slurm_cluster, tmp_path / "b.db", tmp_path / "b.sweep.json", "--no-reuse",
                    "--slurm-folder", str(folder))
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert clusters.peaks_of(tmp_path / "b.sweep.json") == local_sweep


def _cancel_one_running(cluster, proc, store) -> str:
    clusters.wait_for_rows(store, 1, proc)  # the probe is done: measurements run now
    end = time.monotonic() + 300
    while time.monotonic() < end and proc.poll() is None:
        running = _running(cluster)
        if running:
            subprocess.run(["scancel", "--signal=KILL", "--full", running[0]],
                           env=clusters.env(**cluster.env()), check=True)
            return running[0]
        time.sleep(0.1)
    raise AssertionError("no measurement job was seen running")


def test_a_job_killed_mid_sweep_is_sent_again_and_nothing_is_lost_or_stored_twice(
        slurm_cluster, local_sweep, tmp_path):
    proc = clusters.popen(clusters.sweep_args(tmp_path / "k.db", tmp_path / "k.sweep.json",
                                              "--executor", "slurm", "--slurm-folder",
                                              str(tmp_path / "jobs")),
                          log=tmp_path / "k.log", **slurm_cluster.env())
    try:
        _cancel_one_running(slurm_cluster, proc, tmp_path / "k.db")
        assert proc.wait(timeout=600) == 0, (tmp_path / "k.log").read_text()[-3000:]
    finally:
        clusters.kill_tree(proc)
    log = (tmp_path / "k.log").read_text()
    assert "1 retried" in log, log[-2000:]
    rows = clusters.stage_rows(tmp_path / "k.db")
    keys = collections.Counter(r[:3] for r in rows)
    assert len(keys) == clusters.KEYS and set(keys.values()) == {1} and \
        all(r[3] == "ok" for r in rows)
    assert clusters.peaks_of(tmp_path / "k.sweep.json") == local_sweep


def test_a_task_that_fails_for_good_is_stored_failed_with_its_node_and_error(slurm_cluster,
                                                                             tmp_path):
    proc = clusters.popen(clusters.sweep_args(tmp_path / "f.db", tmp_path / "f.sweep.json",
                                              "--executor", "slurm", "--retries", "0",
                                              "--slurm-folder", str(tmp_path / "jobs")),
                          log=tmp_path / "f.log", **slurm_cluster.env())
    try:
        job = _cancel_one_running(slurm_cluster, proc, tmp_path / "f.db")
        proc.wait(timeout=600)
    finally:
        clusters.kill_tree(proc)
    failed = [r for r in clusters.stage_rows(tmp_path / "f.db") if r[3] == "failed"]
    assert len(failed) == 1, (tmp_path / "f.log").read_text()[-3000:]
    node, error = failed[0][5], failed[0][6]
    assert node == os.uname().nodename and f"on node {node}" in error
    assert f"Slurm job {job} ended CANCELLED" in error and "tried 1 time" in error


def test_a_driver_killed_mid_sweep_adopts_its_jobs_when_run_again(slurm_cluster, local_sweep,
                                                                  tmp_path):
    args = clusters.sweep_args(tmp_path / "d.db", tmp_path / "d.sweep.json", "--executor",
                               "slurm", "--slurm-folder", str(tmp_path / "jobs"))
    proc = clusters.popen(args, log=tmp_path / "d1.log", **slurm_cluster.env())
    try:
        clusters.wait_for_rows(tmp_path / "d.db", 1, proc)
        os.kill(proc.pid, signal.SIGKILL)  # the driver only: its array goes on in Slurm
        proc.wait()
    finally:
        clusters.kill_tree(proc)
    before = len(clusters.stage_rows(tmp_path / "d.db"))
    assert before < clusters.KEYS
    again = clusters.mcap(args, **slurm_cluster.env())
    assert again.returncode == 0, again.stderr[-3000:]
    # the stages still owed were adopted from the first array, not sent again
    assert f"adopted {clusters.KEYS - before} task(s)" in again.stderr, again.stderr[-2000:]
    rows = clusters.stage_rows(tmp_path / "d.db")
    keys = collections.Counter(r[:3] for r in rows)
    assert len(keys) == clusters.KEYS and set(keys.values()) == {1}
    assert clusters.peaks_of(tmp_path / "d.sweep.json") == local_sweep
    assert not list((tmp_path / "jobs").iterdir())  # every file of both drivers is gone


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
