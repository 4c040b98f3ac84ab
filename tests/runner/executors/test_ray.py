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


def test_a_sweep_over_two_nodes_equals_the_local_one_byte_for_byte(ray_cluster, local_sweep,
                                                                    tmp_path):
    composed = _ray(ray_cluster, tmp_path / "a.db", tmp_path / "a.sweep.json")
    assert composed.returncode == 0, composed.stderr[-3000:]
    assert clusters.peaks_of(tmp_path / "a.sweep.json") == local_sweep
    rows = clusters.stage_rows(tmp_path / "a.db")
    assert len(rows) == clusters.KEYS and all(r[3] == "ok" for r in rows)
    # both nodes measured: the head (resource head) and the second (resource node2)
    nodes = {r[5] for r in rows}
    line = _nodes_line(composed.stderr)
    assert len(nodes) == 2 and all(n in line for n in nodes), (nodes, line)
    assert "head 1" in line and "node2 1" in line
    assert "tasks: 6 done" in composed.stderr
    # direct: every partitioning's stages measured again, each in a fresh process: the
    # same stage read twice reads the same bytes (0 spread)
    direct = _ray(ray_cluster, tmp_path / "b.db", tmp_path / "b.sweep.json", "--no-reuse")
    assert direct.returncode == 0, direct.stderr[-3000:]
    assert clusters.peaks_of(tmp_path / "b.sweep.json") == local_sweep


def test_a_killed_worker_is_retried_and_no_stage_is_lost_or_stored_twice(ray_cluster,
                                                                          local_sweep, tmp_path):
    proc = clusters.popen(clusters.sweep_args(tmp_path / "k.db", tmp_path / "k.sweep.json",
                                              "--executor", "ray", "--ray-address",
                                              ray_cluster.address),
                          prefix=ray_cluster.prefix, log=tmp_path / "k.log")
    try:
        killed = None
        end = time.monotonic() + 300
        while killed is None and time.monotonic() < end and proc.poll() is None:
            running = ray_cluster.task_processes()
            if running:
                os.kill(running[0], signal.SIGKILL)  # the worker process, mid-task
                killed = running[0]
            time.sleep(0.05)
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


def test_a_driver_killed_mid_sweep_resumes_without_repeating_a_stage(ray_cluster, local_sweep,
                                                                     tmp_path):
    args = clusters.sweep_args(tmp_path / "d.db", tmp_path / "d.sweep.json", "--executor",
                               "ray", "--ray-address", ray_cluster.address)
    proc = clusters.popen(args, prefix=ray_cluster.prefix, log=tmp_path / "d1.log")
    try:
        clusters.wait_for_rows(tmp_path / "d.db", 2, proc)
        os.kill(proc.pid, signal.SIGKILL)  # the driver (nsenter execs it: this pid)
        proc.wait()
    finally:
        clusters.kill_tree(proc)
    before = len(clusters.stage_rows(tmp_path / "d.db"))
    assert 2 <= before < clusters.KEYS
    again = clusters.mcap(args, prefix=ray_cluster.prefix)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{clusters.KEYS - before} stages measured now" in again.stdout, again.stdout
    rows = clusters.stage_rows(tmp_path / "d.db")
    keys = collections.Counter(r[:3] for r in rows)
    assert len(keys) == clusters.KEYS and set(keys.values()) == {1}
    assert clusters.peaks_of(tmp_path / "d.sweep.json") == local_sweep


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
