"""The engine registry's contract: every registered engine this machine can run measures a
2-stage run of the exact test model (tests/runner/toy_models.py) through the one Runner,
and every engine refuses what it cannot run, naming the values, before a process starts."""
from __future__ import annotations

import sys

import pytest

from mcap.models.spec import trusted

from mcap.core.errors import McapError
from mcap.core.types import Setup
from mcap.runner import engines, open_runner

P = 50_000
EXACT = trusted(f"tests.runner.toy_models:exact:params={P}")  # as if typed (issue 12)


def _gpus() -> int:
    import torch
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _runnable(name: str):
    """The device this engine can run a 2-stage setup on here, or None."""
    for device in engines.get(name).devices:
        setup = Setup(stages=2, batch_size=4, chunks=2, device=device, engine=name)
        try:
            engines.get(name).check(setup, _gpus() if device == "cuda" else 0)
            return setup
        except McapError:
            continue
    return None


def test_listing_engines_does_not_import_torch():
    import subprocess
    code = "import sys; from mcap.runner import engines; engines.names(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert engines.names()[0] == engines.DEFAULT


@pytest.mark.integration
@pytest.mark.parametrize("name", engines.names())
def test_every_engine_that_runs_here_measures_two_stages(name):
    setup = _runnable(name)
    if setup is None:
        pytest.skip(f"engine {name} cannot run on this machine ({_gpus()} GPUs)")
    with open_runner(EXACT, setup, timeout=120) as runner:
        run = runner.measure((1, 3))
        again = runner.measure((1, 3))
    assert run.status == "ok", run.error
    assert len(run.peaks) == 2 and all(p > 0 for p in run.peaks)
    assert run.peaks == again.peaks  # history-free: the same run twice reads the same bytes
    if setup.device == "cpu":  # weights + gradients + momentum of n layers at least
        assert run.peaks[0] >= 3 * 4 * P and run.peaks[1] >= 3 * 4 * P * 3


def test_engines_refuse_what_they_cannot_run_naming_the_values():
    gpipe = engines.get("torchgpipe")
    with pytest.raises(McapError, match="torchgpipe runs on CUDA devices only"):
        gpipe.check(Setup(stages=2, engine="torchgpipe"), 0)
    with pytest.raises(McapError, match="needs 4 CUDA devices .* but found 1"):
        gpipe.check(Setup(stages=4, device="cuda", engine="torchgpipe"), 1)
    with pytest.raises(McapError, match="only the gpipe schedule, not '1f1b'"):
        gpipe.check(Setup(stages=2, chunks=4, device="cuda", engine="torchgpipe", schedule="1f1b"), 2)
    with pytest.raises(McapError, match="no CUDA device was found"):
        engines.get("pipelining").check(Setup(stages=2, device="cuda"), 0)
    with pytest.raises(McapError, match="unknown engine 'warp'; expected one of pipelining, torchgpipe"):
        engines.get("warp")
    with pytest.raises(McapError, match="engine 'warp' is not one of pipelining, torchgpipe"):
        open_runner(EXACT, Setup(stages=2, engine="warp"))


def test_cpu_process_cap_refuses_before_a_process_starts(monkeypatch, tmp_path, capsys):
    """One CPU process per stage/device, at most MAX_CPU_PROCESSES (64) unless
    MCAP_MAX_CPU_PROCESSES raises it: measure --plan 4:tp128 starts nothing."""
    from mcap.cli.main import main
    from mcap.runner.pool import WorkerPool

    monkeypatch.delenv("MCAP_MAX_CPU_PROCESSES", raising=False)
    for name in ("pipelining", "hybrid"):
        engines.get(name).check(Setup(stages=64, engine=name), 0)
        with pytest.raises(McapError, match=f"a run of 65 devices on engine {name} needs 65 CPU "
                                            "processes .* at most 64 .* MCAP_MAX_CPU_PROCESSES"):
            engines.get(name).check(Setup(stages=65, engine=name), 0)
    monkeypatch.setenv("MCAP_MAX_CPU_PROCESSES", "128")
    engines.get("hybrid").check(Setup(stages=65, engine="hybrid"), 0)
    monkeypatch.setenv("MCAP_MAX_CPU_PROCESSES", "lots")
    with pytest.raises(McapError, match="MCAP_MAX_CPU_PROCESSES='lots' is not a whole number"):
        engines.get("hybrid").check(Setup(stages=2, engine="hybrid"), 0)
    monkeypatch.delenv("MCAP_MAX_CPU_PROCESSES")

    started = []
    monkeypatch.setattr(WorkerPool, "start", lambda self: started.append(self))
    code = main(["measure", "--model", "gpt:layers=2,hidden=32,heads=2,vocab=64,seq=8",
                 "--batch-size", "8", "--chunks", "2", "--plan", "4:tp128", "--store",
                 str(tmp_path / "s.sqlite")])
    err = capsys.readouterr().err
    assert code == 2 and "needs 128 CPU processes" in err and started == []
