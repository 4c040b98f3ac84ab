"""Executor ``ray`` on a real two-node Ray cluster on 127.0.0.1 (``bin/ray-local``; issue
42): a sweep reads the local sweep's peaks to the byte, composed and direct, with tasks on
both nodes; a worker killed mid-task is retried and a driver killed mid-sweep resumes, with
no stage lost or stored twice; bad input exits 2 naming the executor and what is missing.
One cluster per session (``conftest.ray_cluster``), always stopped; the tests share one
xdist worker (``xdist_group``) so it starts once."""
from __future__ import annotations

import collections
import signal
import os
import time

import pytest

from tests.runner.executors import clusters

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("ray")]


def _ray(cluster, store, out, *more, **kw):
    return clusters.mcap(clusters.sweep_args(store, out, "--executor", "ray", "--ray-address",
                                             cluster.address, *more),
                         prefix=cluster.prefix, **kw)


def _nodes_line(stderr: str) -> str:
    return next(line for line in stderr.splitlines() if line.startswith("mcap: executor ray:"))


def test_a_sweep_over_two_nodes_with_a_worker_killed_equals_the_local_one(ray_cluster,
                                                                          local_sweep, tmp_path):
    """Composed from stages alone, one worker process killed mid-task: retried, every stage
    key stored once, the peaks the local sweep's to the byte, tasks on both nodes."""
    proc = clusters.popen(clusters.sweep_args(tmp_path / "k.db", tmp_path / "k.sweep.json",
                                              "--executor", "ray", "--ray-address",
                                              ray_cluster.address),
                          prefix=ray_cluster.prefix, log=tmp_path / "k.log")
    try:
        clusters.wait_for_rows(tmp_path / "k.db", 1, proc)  # the probe is done
        killed = None
        end = time.monotonic() + 300
        while killed is None and time.monotonic() < end and proc.poll() is None:
            running = ray_cluster.task_processes()
            if running:
                os.kill(running[0], signal.SIGKILL)  # the worker process, mid-task
                killed = running[0]
            time.sleep(0.02)
        assert killed, "no measurement task was seen running"
        assert proc.wait(timeout=600) == 0, (tmp_path / "k.log").read_text()[-3000:]
    finally:
        clusters.kill_tree(proc)
    log = (tmp_path / "k.log").read_text()
    assert "1 retried" in log, log[-2000:]
    rows = clusters.stage_rows(tmp_path / "k.db")
    keys = collections.Counter(r[:3] for r in rows)
    assert len(keys) == clusters.KEYS and set(keys.values()) == {1}  # none lost, none twice
    assert all(r[3] == "ok" for r in rows)
    assert clusters.peaks_of(tmp_path / "k.sweep.json") == local_sweep
    nodes = clusters.done_by_node(log)  # both nodes measured: the head's and node2's
    line = _nodes_line(log)
    assert len(nodes) == 2 and sum(nodes.values()) == clusters.KEYS
    assert all(n in line for n in nodes), (nodes, line)
    assert "head 1" in line and "node2 1" in line


def test_a_direct_sweep_whose_driver_was_killed_resumes_and_equals_the_local_one(
        ray_cluster, local_sweep, tmp_path):
    """Every partitioning measured whole (--no-reuse: each stage key read in several fresh
    processes, 0 spread), the driver killed half-way and run again: nothing measured twice."""
    args = clusters.sweep_args(tmp_path / "d.db", tmp_path / "d.sweep.json", "--no-reuse",
                               "--executor", "ray", "--ray-address", ray_cluster.address)
    proc = clusters.popen(args, prefix=ray_cluster.prefix, log=tmp_path / "d1.log")
    try:
        clusters.wait_for_rows(tmp_path / "d.db", 1, proc)
        os.kill(proc.pid, signal.SIGKILL)  # the driver (nsenter execs it: this pid)
        proc.wait()
    finally:
        clusters.kill_tree(proc)
    before = clusters.stage_rows(tmp_path / "d.db")
    runs_before = _runs(tmp_path / "d.db")
    assert 1 <= len(before) < 2 * clusters.BALANCES
    again = clusters.mcap(args, prefix=ray_cluster.prefix)
    assert again.returncode == 0, again.stderr[-3000:]
    assert clusters.peaks_of(tmp_path / "d.sweep.json") == local_sweep
    runs = _runs(tmp_path / "d.db")
    assert len(runs) == len(set(runs)) == clusters.BALANCES and set(runs_before) <= set(runs)
    after = clusters.stage_rows(tmp_path / "d.db")
    assert after[:len(before)] == before  # what the first driver stored stays as it was
    jobs = _stage_jobs(tmp_path / "d.db")
    assert len(jobs) == 2 * clusters.BALANCES and len(set(jobs)) == len(jobs)  # none twice


def _runs(store) -> list:
    import sqlite3
    with sqlite3.connect(store) as conn:
        return [r[0] for r in conn.execute("SELECT balance FROM runs WHERE composed = 0")]


def _stage_jobs(store) -> list:
    import sqlite3
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT balance, stage FROM stage_runs").fetchall()


def test_bad_input_exits_2_naming_the_executor_and_what_is_missing(ray_cluster, tmp_path):
    gpu = _ray(ray_cluster, tmp_path / "g.db", tmp_path / "g.sweep.json", "--device", "cuda")
    assert gpu.returncode == 2 and "executor ray" in gpu.stderr
    assert "no GPU resources" in gpu.stderr and "Traceback" not in gpu.stderr, gpu.stderr
    cores = _ray(ray_cluster, tmp_path / "c.db", tmp_path / "c.sweep.json", "--threads", "2")
    assert cores.returncode == 2 and "asks 2 CPU" in cores.stderr, cores.stderr
    nobody = clusters.mcap(clusters.sweep_args(tmp_path / "n.db", tmp_path / "n.sweep.json",
                                               "--executor", "ray", "--ray-address",
                                               "127.0.0.1:1"))
    assert nobody.returncode == 2 and "Traceback" not in nobody.stderr
    assert "executor ray: no Ray cluster answers at 127.0.0.1:1" in nobody.stderr
