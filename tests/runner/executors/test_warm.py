"""A Ray CPU task's measurement in a stage process forked for it by the worker's zygote
(``mcap.runner.executors.warm``; issue 42, Ray's overhead per task), run here without Ray:
this test process plays the long-lived Ray worker. Every measurement gets a process of its
own (a new pid each, the zygote's stays), reads the local pool's peak to the byte whatever
ran before it, and a probe reports the model and the machine as a stage process sees them."""
from __future__ import annotations

import subprocess
import sys

import pytest

from mcap.core.types import Setup
from mcap.runner.protocol import Job
from tests.conftest import REPO

pytestmark = pytest.mark.integration

MODEL = "gpt:layers=2,hidden=32,vocab=64,seq=16"  # 4 layers
SETUP = Setup(stages=2, batch_size=4, chunks=2)
_LOCAL = ("import json, sys\n"
          "from mcap.runner import open_runner\n"
          "from mcap.core.types import Setup\n"
          "with open_runner(sys.argv[1], Setup(stages=2, batch_size=4, chunks=2)) as r:\n"
          "    runs = r.measure_stages([((1, 3), 0), ((1, 3), 1), ((2, 2), 1)])\n"
          "print(json.dumps([x.peak for x in runs]))\n")


@pytest.fixture
def warm_worker(monkeypatch):
    from mcap.runner.executors import warm
    from mcap.runner.machine import process_env
    for k, v in process_env(SETUP.threads).items():  # a task worker's environment
        monkeypatch.setenv(k, v)
    yield warm
    warm.stop()


def test_each_task_is_a_fresh_process_reading_the_local_peaks(warm_worker):
    import json
    local = json.loads(subprocess.run([sys.executable, "-c", _LOCAL, MODEL], cwd=REPO,
                                      capture_output=True, text=True, check=True
                                      ).stdout.strip().splitlines()[-1])
    warm = warm_worker
    warm.start()  # as the worker's set-up hook does
    probe = warm.run("probe", MODEL, SETUP, None, "here")
    assert probe.result is None and probe.info.num_layers == 4 and probe.machine is not None
    # the big stage first, then the small ones: what ran before must not change a peak
    jobs = [((1, 3), 1), ((1, 3), 0), ((2, 2), 1), ((1, 3), 1)]
    outs = [warm.run("measure", MODEL, SETUP, Job(i + 1, b, None, stage=s), "here")
            for i, (b, s) in enumerate(jobs)]
    assert all(o.result.status == "ok" and o.result.node == "here" for o in outs)
    assert len({o.pid for o in outs} | {probe.pid}) == 5  # a process of its own each
    zygote = warm._held[1]
    assert not zygote.dead and zygote.proc.pid not in {o.pid for o in outs}
    peaks = [o.result.peak for o in outs]
    assert peaks[0] == peaks[3]  # the same stage, before and after others: 0 spread
    assert [peaks[1], peaks[0], peaks[2]] == local  # the local pool's bytes


def test_bad_input_is_reported_not_raised(warm_worker):
    out = warm_worker.run("probe", "nosuchmodel:x=1", SETUP, None, "here")
    assert out.bad_input and "nosuchmodel" in out.bad_input and out.result is None
