"""Session fixtures of the executor tests: the clusters (started once, always stopped) and
the local sweeps their results are compared with (``clusters.py`` says how)."""
from __future__ import annotations

import pytest

from tests.runner.executors import clusters


@pytest.fixture(scope="session")
def ray_cluster():
    why = clusters.ray_unavailable()
    if why:
        pytest.skip(why)
    cluster = clusters.start_ray()
    try:
        yield cluster
    finally:
        clusters.stop_ray(cluster)


@pytest.fixture(scope="session")
def slurm_cluster():
    why = clusters.slurm_unavailable()
    if why:
        pytest.skip(why)
    cluster = clusters.start_slurm()
    try:
        yield cluster
    finally:
        clusters.stop_slurm(cluster)


@pytest.fixture(scope="session")
def local_sweep(tmp_path_factory):
    """The local executor's sweep of ``clusters.MODEL``, composed from stages run alone, and
    its per-stage peaks by balance (the truth the clusters must read to the byte)."""
    folder = tmp_path_factory.mktemp("local-sweep")
    out = clusters.mcap(clusters.sweep_args(folder / "store.db", folder / "s.sweep.json",
                                            "--executor", "local"))
    assert out.returncode == 0, out.stderr[-3000:]
    return clusters.peaks_of(folder / "s.sweep.json")
