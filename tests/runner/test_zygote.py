"""Warm CPU stage processes (issue 13): one zygote per pool imports torch once and forks
every stage process; a restart forks again; forked stages measure exactly what spawned
ones measure; closing leaves nothing behind."""
import os
import signal

import pytest

from mcap.models.spec import trusted

from mcap.core.types import Setup
from mcap.runner import open_runner

pytestmark = pytest.mark.integration

P = 100_000
EXACT = trusted(f"tests.runner.toy_models:exact:params={P}")  # as if typed (issue 12)
TWO = Setup(stages=2, batch_size=4, chunks=2)


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])


def test_forked_stages_measure_what_spawned_ones_do_and_a_restart_is_a_fork(monkeypatch):
    # Stages together: a killed stage fails the run and the pool restarts by forking
    # (stages alone retry a killed slot's stage instead: tests/runner/test_runner.py).
    with open_runner(EXACT, TWO, timeout=120, isolation="pipeline") as r:
        zygote = r._pool._zygote.proc.pid
        first = r.worker_pids
        assert [_parent(pid) for pid in first] == [zygote, zygote]
        forked = r.measure((1, 3))
        os.kill(first[1], signal.SIGKILL)
        failed = r.measure((1, 3))
        again = r.measure((1, 3))
        second = r.worker_pids
        # the same zygote forked the new stage processes: no second torch import
        assert r._pool._zygote.proc.pid == zygote
        assert set(second).isdisjoint(first)
        assert [_parent(pid) for pid in second] == [zygote, zygote]
    assert failed.status == "failed" and "killed by signal 9" in failed.error
    monkeypatch.setenv("MCAP_STAGE_START", "spawn")
    with open_runner(EXACT, TWO, timeout=120) as s:
        assert s._pool._zygote is None
        assert all(_parent(pid) == os.getpid() for pid in s.worker_pids)
        spawned = s.measure((1, 3))
    for run in (forked, again, spawned):
        assert run.status == "ok", run.error
    # counted bytes start at zero in a forked stage exactly as in a fresh process
    assert forked.peaks == again.peaks == spawned.peaks
    assert forked.breakdown == spawned.breakdown
    for pid in [zygote, *first, *second]:  # closing reaped the zygote and its children
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_zygote_that_is_not_single_threaded_refuses_and_the_pool_spawns(monkeypatch):
    """Forking a process whose thread pools run may deadlock the child: the zygote checks
    (numpy's OpenBLAS starts a pool at import unless told to run one thread) and the pool
    then spawns plain stage processes, which measure as usual."""
    from mcap.runner import pool

    monkeypatch.setattr(pool, "ZYGOTE_ENV", {"OPENBLAS_NUM_THREADS": "2"})
    with open_runner(EXACT, TWO, timeout=120) as r:
        run = r.measure((2, 2))
        refused = r._pool._spawn_only
        parents = [_parent(pid) for pid in r.worker_pids]
    assert run.status == "ok", run.error
    assert refused and parents == [os.getpid(), os.getpid()]
