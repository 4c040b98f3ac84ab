"""How much CPU stages slow each other computing side by side (mcap/runner/corun.py):
measured for real with the model's own layers, kept per machine, used by the estimate."""
from __future__ import annotations

import json
import time

import pytest

from mcap.core.types import Setup
from mcap.runner import corun, machinecache

GPT = "gpt:layers=4,hidden=64,heads=2,vocab=64,seq=16"


@pytest.fixture
def measured_here(tmp_path, monkeypatch):
    """Co-run measurement on (the suite turns it off), an empty cache of the test's own."""
    monkeypatch.delenv(corun.ENV, raising=False)
    monkeypatch.setenv(machinecache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(corun, "_cache", {})
    return tmp_path / "cache"


def test_the_factors_are_each_processes_cpu_seconds_together_over_alone():
    outs = [{"alone": 1.0, "together": {"2": 1.2, "3": 1.5}},
            {"alone": 2.0, "together": {"2": 2.2, "3": 2.2}},
            {"alone": 4.0, "together": {"3": 4.4}}]
    assert corun.factors(outs) == pytest.approx((1.0, 1.15, 1.1))  # medians of 1.2|1.1, 1.5|1.1|1.1


def test_even_slices_cover_every_layer_once():
    for L, k in [(29, 4), (10, 3), (4, 4), (3, 5), (1, 2)]:
        slices = corun.even_slices(L, k)
        assert slices[0][0] == 0 and slices[-1][1] == L
        assert all(a[1] == b[0] and a[0] < a[1] for a, b in zip(slices, slices[1:]))
        assert len(slices) == min(k, L)


def test_nothing_is_measured_on_cuda_with_one_stage_or_when_turned_off(measured_here, monkeypatch):
    monkeypatch.setattr(corun, "measure", lambda *a: pytest.fail("measured"))
    assert corun.factors_for(GPT, Setup(stages=2, batch_size=4, device="cuda"), 6) == ()
    assert corun.factors_for(GPT, Setup(stages=1, batch_size=4), 6) == ()
    monkeypatch.setenv(corun.ENV, "off")
    assert corun.factors_for(GPT, Setup(stages=3, batch_size=4), 6) == ()


@pytest.mark.parametrize("value", [{"factors": [1.0]}, {"factors": "1,2"},
                                   {"factors": [1.0, float("nan")]}, {"factors": [1.0, 99.0]},
                                   {"factors": [1.0, True]}, {}, {"factors": [1.0, 1.05, 1.1]}])
def test_a_kept_value_that_is_not_factors_is_measured_again(measured_here, monkeypatch, value):
    setup = Setup(stages=3, batch_size=4, chunks=1)
    key = machinecache.machine_key(what="corun", spec=GPT, micro=4, threads=1, processes=3)
    measured_here.mkdir()
    (measured_here / machinecache.CACHE_FILE).write_text(json.dumps(
        {"version": 1, "corun": [{"key": key, "measured_at": time.time(), "value": value}]}))
    calls = []
    monkeypatch.setattr(corun, "measure", lambda *a: calls.append(a) or (1.0, 1.1, 1.2))
    got = corun.factors_for(GPT, setup, 6)
    if value == {"factors": [1.0, 1.05, 1.1]}:  # the well-formed one is read back
        assert got == (1.0, 1.05, 1.1) and not calls
    else:
        assert got == (1.0, 1.1, 1.2) and len(calls) == 1


@pytest.mark.integration
def test_measured_for_real_once_then_kept_for_the_machine(measured_here, monkeypatch):
    setup = Setup(stages=3, batch_size=8, chunks=2)
    got = corun.factors_for(GPT, setup, 6)  # 3 processes, each a third of the layers
    assert len(got) == 3 and got[0] == 1.0
    assert all(0.5 < x < 3.0 for x in got)  # CPU seconds together over alone, per process
    doc = json.loads((measured_here / machinecache.CACHE_FILE).read_text())
    assert [e["value"]["factors"] for e in doc["corun"]] == [list(got)]
    monkeypatch.setattr(corun, "_cache", {})  # a new process: read back, nothing measured
    monkeypatch.setattr(corun, "measure", lambda *a: pytest.fail("measured again"))
    assert corun.factors_for(GPT, setup, 6) == got
    # another micro-batch is other work: measured anew
    with pytest.raises(pytest.fail.Exception):
        corun.factors_for(GPT, Setup(stages=3, batch_size=16, chunks=2), 6)


@pytest.mark.integration
def test_the_runners_estimate_replays_with_the_measured_factors(measured_here, monkeypatch):
    """Runner.estimate: the stages' own times over the link, slowed as measured."""
    import dataclasses

    from mcap.core import stagetime
    from mcap.runner import open_runner
    from mcap.runner.link import link_for
    setup = Setup(stages=3, batch_size=8, chunks=2)
    monkeypatch.setattr(corun, "measure", lambda *a: (1.0, 1.5, 2.0))
    with open_runner(GPT, setup, timeout=300, isolation="stage") as runner:
        run = runner.measure((2, 2, 2))
    assert run.status == "ok" and run.estimated
    link = link_for(setup)
    plain = stagetime.samples_per_second(run.times, setup, link)
    slowed = stagetime.samples_per_second(run.times, setup,
                                          dataclasses.replace(link, corun=(1.0, 1.5, 2.0)))
    assert run.samples_per_second == pytest.approx(slowed) and slowed < plain


def test_a_failed_measurement_leaves_fair_sharing_and_says_so_once(measured_here, monkeypatch,
                                                                  capsys):
    from mcap.core.errors import McapError

    def fails(*a):
        raise McapError("measuring how 3 stage processes of 'x' slow each other failed: boom")

    monkeypatch.setattr(corun, "measure", fails)
    setup = Setup(stages=3, batch_size=8, chunks=2)
    assert corun.factors_for(GPT, setup, 6) == () == corun.factors_for(GPT, setup, 6)
    err = capsys.readouterr().err
    assert err.count("boom") == 1 and "fair sharing only" in err
    assert not (measured_here / machinecache.CACHE_FILE).exists()  # nothing kept on disk


def test_processes_that_cannot_fit_in_host_memory_are_refused_before_any_starts(measured_here,
                                                                             monkeypatch,
                                                                             capsys):
    import subprocess
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **k: pytest.fail("a process started"))
    from mcap.models import limits
    monkeypatch.setattr(limits, "host_memory_bytes", lambda: 10 * 2**30)
    setup = Setup(stages=4, batch_size=8, chunks=2)
    assert corun.factors_for(GPT, setup, 6, param_bytes=3 * 2**30) == ()  # 5 x 3 GiB > 10 GiB
    err = capsys.readouterr().err
    assert "16,106,127,360 bytes" in err and "fair sharing only" in err
