"""The zygote ``python -m mcap`` starts before it reads its command line
(``mcap.runner.early``, issue 42 item 6): only for commands that will fork CPU stage
processes here, adopted by the pool when its environment is the pool's, ended otherwise."""
from __future__ import annotations

import pytest

from mcap.runner import early

MEASURE = ["measure", "--model", "gpt:layers=2,hidden=32,vocab=64,seq=16", "--balance", "2,2"]


def test_which_command_lines_start_one(monkeypatch):
    monkeypatch.delenv("MCAP_EXECUTOR", raising=False)
    monkeypatch.delenv("MCAP_STAGE_START", raising=False)
    assert early.wanted(MEASURE) == 1
    assert early.wanted([*MEASURE, "--threads", "2"]) == 2
    assert early.wanted(["sweep", "--threads=2"]) == 2
    for other in (["predict"], [*MEASURE, "--device", "cuda"], [*MEASURE, "--executor", "ray"],
                  [*MEASURE, "--help"], [*MEASURE, "--nnodes", "2"], [*MEASURE, "--threads", "x"],
                  []):
        assert early.wanted(other) is None, other
    monkeypatch.setenv("MCAP_EXECUTOR", "slurm")
    assert early.wanted(MEASURE) is None
    assert early.wanted([*MEASURE, "--executor", "local"]) == 1
    monkeypatch.delenv("MCAP_EXECUTOR")
    monkeypatch.setenv("MCAP_STAGE_START", "spawn")
    assert early.wanted(MEASURE) is None


@pytest.mark.integration
def test_the_pool_adopts_it_and_measures_the_same_bytes(monkeypatch):
    from mcap.core.types import Setup
    from mcap.runner import open_runner
    monkeypatch.delenv("MCAP_EXECUTOR", raising=False)
    setup = Setup(stages=2, batch_size=4, chunks=2)
    with open_runner(MEASURE[2], setup) as runner:
        plain = runner.measure((2, 2))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    early.maybe_start(MEASURE)
    started = early._early[1]
    monkeypatch.setenv("MCAP_ISOLATION", "stage")  # what the CLI sets for itself
    # what torch sets once the command has built its model on the meta device (it imports
    # torch._inductor): every training line discarded its early zygote over it
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/tmp/torchinductor_mcap_test")
    with open_runner(MEASURE[2], setup) as runner:
        adopted = runner.measure((2, 2))
        assert runner._pool._zygote is started and early._early is None
    assert adopted.peaks == plain.peaks
    early.maybe_start([*MEASURE, "--threads", "2"])  # another environment: ended, not used
    other = early._early[1]
    with open_runner(MEASURE[2], setup) as runner:
        runner.model_info
        assert runner._pool._zygote is not other and early._early is None
    assert other.dead


@pytest.mark.integration
def test_the_zygote_answers_a_schedules_action_list_as_generate_does():
    """The estimate's action list comes from the pool's zygote, which has torch's
    pipelining imported (the command's own process would import it for a millisecond's
    list); one torch refuses comes back None, and the caller's own generate raises."""
    from mcap.core.types import Setup
    from mcap.runner import open_runner
    from mcap.runner.orders import generate
    with open_runner(MEASURE[2], Setup(stages=2, batch_size=4, chunks=2)) as runner:
        runner.model_info
        got = runner._pool.orders("1f1b", 2, 1, 2)
        refused = runner._pool.orders("1f1b", 4, 1, 2)
    assert got == generate("1f1b", 2, 1, 2)
    assert refused is None


@pytest.mark.integration
def test_a_one_off_measure_leaves_torchs_pipelining_to_the_stage_processes(tmp_path):
    """What a one-off ``measure`` (stages alone, estimated throughput) imports in its own
    process: torch for the model's layers, but not ``torch.distributed.pipelining`` (with
    sympy, about a torch import more; issue 42 item 6), nor torch._dynamo, which torch's
    meta version of ``normal_`` imported while the GPT was counted on the meta device."""
    import os
    import subprocess
    import sys
    code = ("import sys\nfrom mcap.cli.main import main\n"
            f"rc = main({[*MEASURE, '--store', str(tmp_path / 's.db')]!r})\n"
            "print(rc, 'torch' in sys.modules, 'torch.distributed.pipelining' in sys.modules,\n"
            "      'torch._dynamo' in sys.modules)")
    # the session's machine cache and no co-run measurement (tests/conftest.py)
    env = {k: v for k, v in os.environ.items() if k not in ("MCAP_EXECUTOR", "MCAP_STAGE_START")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=600)
    assert done.stdout.split()[-4:] == ["0", "True", "False", "False"], done.stdout + done.stderr
