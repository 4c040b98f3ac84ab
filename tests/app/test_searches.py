"""The dashboard's background searches (mcap.app.searches): bo starts once however many
sessions press the button, reports its speed, and stops when asked (issue 14 item 5)."""
from __future__ import annotations

import threading
import time

from mcap.app import searches
from mcap.io import datasets


def _profile():
    return datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4.profile.json"))


def test_bo_starts_once_when_two_sessions_press_together():
    profile = _profile()
    got, barrier = [], threading.Barrier(4)

    def press():
        barrier.wait()
        got.append(searches.bo_run("test:once", profile, 4, 3, 4, start=True))
    threads = [threading.Thread(target=press) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(r) for r in got}) == 1
    run = got[0]
    run.thread.join(120)
    assert run.finished and run.result is not None and len(run.curve) == 4
    assert run.elapsed > 0 and run.rate > 0


def test_bo_stops_when_asked_and_keeps_its_curve():
    run = searches.BoRun(_profile(), 4, seed=0, iterations=400)
    deadline = time.monotonic() + 60
    while len(run.curve) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    run.stop()
    run.thread.join(60)
    assert run.finished and run.result is None
    assert "stopped after" in run.error and len(run.curve) >= 3
    assert len(run.curve) < 400


def test_the_time_baseline_of_a_cuda_profile_is_left_out_without_a_gpu_naming_why():
    """Issue 30: the dashboard leaves time out as ``evaluate`` does, with the same words,
    and starts no timing child for it; a CPU profile is timed as before."""
    import pytest

    from mcap.app.devices import gpu_count
    from mcap.core.search.time import NoDevice
    cuda = datasets.load(datasets.parse_ref("bundled:vgg11-224-b1104-h100x4.profile.json"))
    assert searches.time_left_out(_profile()) is None
    if gpu_count():
        assert searches.time_left_out(cuda) is None
        return
    note = searches.time_left_out(cuda)
    assert note.startswith("the profile was measured on cuda; this machine has no CUDA device")
    with pytest.raises(NoDevice, match="no CUDA device"):
        searches.run_method(cuda, 4, "time")
    searches.start_time("test:cuda", cuda, 4)
    assert searches.time_state("test:cuda", 4) == (False, note)
