"""History-free runs on CPU stage processes (issue 11): a partitioning's peaks do not
depend on what the persistent stage processes ran before, nor on the caller's thread
environment (the stages are pinned to Setup.threads).

The model holds VGG11's conv5 layers, whose oneDNN backward workspace grows with the
intra-op threads (about 4 x weight bytes per thread), so a stage process that ran with
other threads would read other peaks here.
"""
import pytest

from mcap.runner import open_runner
from mcap.core.types import Setup

pytestmark = pytest.mark.integration

SMALL_VGG = "vgg11:image_size=32,hidden=64"
SETUP = Setup(stages=2, batch_size=4, chunks=2)
A, B = (16, 14), (8, 22)  # conv5_1 in stage 1 of A, in stage 1 of B with more before it


def _same(x, y):
    assert x.status == y.status == "ok", (x.error, y.error)
    assert x.peaks == y.peaks
    assert x.breakdown == y.breakdown


def test_peaks_do_not_depend_on_the_runs_before_or_the_callers_threads(monkeypatch):
    with open_runner(SMALL_VGG, SETUP, timeout=120) as runner:
        a_fresh = runner.measure(A)
        b_after_a = runner.measure(B)
        a_after_b = runner.measure(A)
        machine = runner.machine
    _same(a_fresh, a_after_b)
    assert a_fresh.peaks != b_after_a.peaks  # two different partitionings were measured
    assert machine.threads == 1 and machine.device == "cpu" and machine.isa
    # A fresh pool, started from an environment asking for 2 OpenMP threads: the stages
    # still run on Setup.threads (1), so B first and A after it read the same bytes.
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    with open_runner(SMALL_VGG, SETUP, timeout=120) as fresh:
        b_fresh = fresh.measure(B)
        a_after_b_fresh = fresh.measure(A)
        fresh_machine = fresh.machine
    _same(b_fresh, b_after_a)
    _same(a_after_b_fresh, a_fresh)
    assert fresh_machine == machine
