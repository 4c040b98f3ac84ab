"""Real runs with real stage processes (torch.distributed.pipelining over gloo, CPU).

The exact model (tests/runner/toy_models.py) makes a stage's peak predictable to the
byte: each layer holds one parameter of P float32 values, so at its peak a stage of n
layers holds its weights (4Pn bytes), their gradients (4Pn), SGD's momentum buffers (4Pn)
and one more gradient-sized temporary (4P: the slice's backward builds a full gradient for
the last micro-batch before adding it in), plus a few hundred bytes of activations.
"""
import os
import signal
import threading

import pytest

from mcap.core.errors import InvalidPartitioning, McapError, UnknownModel
from mcap.models.spec import trusted
from mcap.runner import open_runner
from mcap.core.types import Setup
from tests.conftest import REPO

# One xdist worker for the whole file: its module fixtures (a runner per isolation, the
# VGG peaks of 6 runs) were measured once in each worker when its tests were split.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("runner-test_runner")]

P = 100_000
EXACT = trusted(f"tests.runner.toy_models:exact:params={P}")  # typed, so trusted
TWO = Setup(stages=2, batch_size=4, chunks=2)
SMALL_VGG = "vgg11:image_size=32,hidden=64"


@pytest.fixture(scope="module", params=["stage", "pipeline"])
def runner(request):
    """Stages run alone (the default, issue 25) and run together: the same contract."""
    with open_runner(EXACT, TWO, timeout=120, isolation=request.param) as r:
        r.model_info  # wait until the stage processes are ready
        yield r


def test_stage_peaks_are_exact_bytes_of_known_tensors(runner):
    run = runner.measure((1, 3))
    assert run.status == "ok", run.error
    for (n, peak, b) in zip((1, 3), run.peaks, run.breakdown):
        assert b.weights == 4 * P * n
        assert b.gradients == 4 * P * n  # every stage trains, the first one too
        assert b.optimizer == 4 * P * n
        assert 4 * P <= b.other < 4 * P + 4096
        assert peak == b.weights + b.gradients + b.optimizer + b.other
    assert run.samples_per_second > 0 and run.seconds > 0


def test_peaks_grow_by_exactly_the_added_parameter_bytes(runner):
    """Doubling P adds exactly 4P(3n + 1) bytes to a stage of n layers: nothing else moved."""
    small = runner.measure((2, 2))
    with open_runner(trusted(f"tests.runner.toy_models:exact:params={2 * P}"), TWO, timeout=120) as big_r:
        big = big_r.measure((2, 2))
    assert small.status == big.status == "ok", (small.error, big.error)
    for a, b in zip(small.peaks, big.peaks):
        assert b - a == 4 * P * (3 * 2 + 1)


def test_persistent_processes_give_identical_consecutive_runs(runner):
    pids = runner.worker_pids
    first = runner.measure((3, 1))
    second = runner.measure((3, 1))
    assert first.status == second.status == "ok"
    assert first.peaks == second.peaks
    assert first.breakdown == second.breakdown
    assert runner.worker_pids == pids  # the same processes served both


def test_model_info_comes_from_the_stage_processes(runner):
    info = runner.model_info
    assert info.num_layers == 4
    assert [layer.param_bytes for layer in info.layers] == [4 * P] * 4


def test_bad_balances_raise_with_the_values(runner):
    with pytest.raises(InvalidPartitioning, match="sums to 5 but the model has 4 layers"):
        runner.measure((2, 3))
    with pytest.raises(InvalidPartitioning, match="3 stages but the setup has 2"):
        runner.measure((1, 1, 2))
    with pytest.raises(InvalidPartitioning, match="no layers"):
        runner.measure((0, 4))


def test_killed_stage_process_is_failed_and_the_next_run_works(runner):
    assert runner.measure((2, 2)).status == "ok"  # a ready pool
    victim = runner.worker_pids[1]
    os.kill(victim, signal.SIGKILL)
    run = runner.measure((2, 2))
    if runner.alone:
        # A stage run alone waits on nobody: its slot is restarted and the stage tried
        # once more in a fresh process, which reads what any fresh process reads.
        assert run.status == "ok", run.error
    else:
        assert run.status == "failed"
        assert "stage process 1" in run.error and "signal 9" in run.error
    again = runner.measure((2, 2))
    assert again.status == "ok", again.error
    assert again.peaks == runner.measure((2, 2)).peaks
    assert victim not in runner.worker_pids


def test_stage_killed_mid_run_is_failed_and_the_next_run_works(runner):
    assert runner.measure((2, 2)).status == "ok"  # a ready pool
    victim = runner.worker_pids[0]
    killer = threading.Timer(0.3, os.kill, (victim, signal.SIGKILL))
    killer.start()
    try:
        for _ in range(200):  # runs take ~0.1 s: keep running until the kill lands
            run = runner.measure((1, 3))
            if run.status != "ok":
                break
    finally:
        killer.join()
    if runner.alone:  # the killed stage was tried once more (see the test above)
        assert run.status == "ok", run.error
    else:
        assert run.status == "failed" and "signal 9" in run.error
    assert runner.measure((1, 3)).status == "ok"


def test_over_capacity_is_oom_a_hang_is_failed_and_the_next_run_works():
    # (1, 3): the 3-layer stage needs 4P*10 bytes; (2, 2): 4P*7 per stage
    setup = Setup(stages=2, batch_size=4, chunks=2, capacity_bytes=4 * P * 8)
    with open_runner(EXACT, setup, timeout=5) as r:
        oom = r.measure((1, 3))
        assert oom.status == "oom"
        assert oom.peaks is None
        assert f"capacity of {4 * P * 8} bytes" in oom.error and "stage 1" in oom.error
        ok = r.measure((2, 2))
        assert ok.status == "ok", ok.error
        assert max(ok.peaks) <= 4 * P * 8

        stopped = r.worker_pids[1]
        os.kill(stopped, signal.SIGSTOP)  # a real hang: the process never answers
        try:
            run = r.measure((2, 2))
        finally:
            try:
                os.kill(stopped, signal.SIGCONT)
            except ProcessLookupError:
                pass  # the runner already killed it
        assert run.status == "failed"
        assert "timed out after 5 s" in run.error
        assert r.measure((2, 2)).status == "ok"


@pytest.fixture(scope="module")
def vgg_peaks():
    """Stage 0 holds VGG's early convolutions, whose activations dominate its peak."""
    out = {}
    for schedule, checkpoint in (("gpipe", "never"), ("gpipe", "except_last"),
                                 ("gpipe", "always"), ("1f1b", "never")):
        setup = Setup(stages=2, batch_size=16, chunks=4, schedule=schedule, checkpoint=checkpoint)
        with open_runner(SMALL_VGG, setup, timeout=120) as r:
            run = r.measure((8, 22))
        assert run.status == "ok", (schedule, checkpoint, run.error)
        out[schedule, checkpoint] = run.peaks
    return out


def test_checkpoint_modes_trade_activation_memory(vgg_peaks):
    never, except_last, always = (vgg_peaks["gpipe", mode][0]
                                  for mode in ("never", "except_last", "always"))
    assert never > except_last > always


def test_1f1b_holds_fewer_micro_batches_than_fill_drain(vgg_peaks):
    assert vgg_peaks["1f1b", "never"][0] < vgg_peaks["gpipe", "never"][0]


def test_bad_setups_are_refused_before_any_process_starts():
    with pytest.raises(UnknownModel, match="nope"):
        open_runner("nope:x=1", TWO)
    with pytest.raises(McapError, match="chunks 2 < stages 4"):
        open_runner(EXACT, Setup(stages=4, batch_size=4, chunks=2, schedule="1f1b"))
    with pytest.raises(McapError, match="batch size 5 does not split into 2"):
        open_runner(EXACT, Setup(stages=2, batch_size=5, chunks=2))
    with pytest.raises(McapError, match="schedule 'zigzag'"):
        open_runner(EXACT, Setup(stages=2, schedule="zigzag"))
    with pytest.raises(McapError, match="CUDA devices only"):
        open_runner(EXACT, Setup(stages=2, engine="torchgpipe"))


def test_a_user_model_that_fails_to_load_is_an_mcap_error():
    with pytest.raises(McapError, match="cannot import"):
        with open_runner(trusted("tests.no_such_module:model"), TWO, timeout=120) as r:
            r.model_info


def test_measure_command_prints_json_and_records_the_run(tmp_path, capsys):
    """The command in this process (tests.conftest.cli): a ``python -m mcap`` child per
    line imported torch again (about 3 CPU s each) before the same stage processes."""
    import json

    from mcap.store import Store
    from tests.conftest import cli

    store_path = tmp_path / "store.sqlite"
    cmd = ["measure", "--model", EXACT, "--balance", "1,3", "--batch-size", "4", "--chunks",
           "2", "--json", "--store", str(store_path)]
    code, out, err = cli(capsys, *cmd)
    assert code == 0, err
    printed = json.loads(out)
    assert printed["status"] == "ok"
    assert len(printed["peaks"]) == 2 and printed["peak"] == max(printed["peaks"])
    assert printed["breakdown"][1]["weights"] == 4 * P * 3
    assert printed["seconds"] > 0 and printed["samples_per_second"] > 0
    # stages alone (the default): the throughput is estimated, over the link it names
    from mcap.core import stagetime
    assert printed["samples_per_second_estimated"] is True
    link = stagetime.link_from_json(printed[stagetime.KEY])
    assert link is not None and link.how == "gloo" and link.bytes_per_second > 0
    code, out, _ = cli(capsys, *[c for c in cmd[:-1] if c != "--json"], tmp_path / "t.sqlite")
    assert code == 0 and "estimated from the stages' own times over gloo" in out, out
    store = Store(str(store_path))
    try:
        study = store.find_study(EXACT, TWO)
        runs = store.runs(study)
    finally:
        store.close()
    assert [r.balance for r in runs] == [(1, 3)]
    assert list(runs[0].peaks) == printed["peaks"]

    code, _, err = cli(capsys, *cmd[:4], "1,2")
    assert code == 2
    assert "balance sums to 3 but the model has 4 layers" in err


def test_sweep_command_says_its_throughputs_are_estimated_and_over_which_link(tmp_path, capsys):
    """Stages run alone (the default): every run's samples/s is replayed from its stages'
    times; the sweep says so, names the link, and the file keeps it (issue 25, item 2)."""
    from mcap.core import stagetime
    from mcap.io import jsonio
    from tests.conftest import cli
    code, out, err = cli(capsys, "sweep", "--model", EXACT, "--stages", "2", "--batch-size", "4",
                         "--chunks", "2", "--store", tmp_path / "s.sqlite",
                         "--out", tmp_path / "s.json")
    assert code == 0, err
    saved = jsonio.load_sweep(tmp_path / "s.json")
    n = len(saved.runs)
    assert n == 3 and all(r.estimated for r in saved.runs)
    link = stagetime.describe(stagetime.link_from_json(saved.extra[stagetime.KEY]))
    assert f"the throughput of {n} of {n} runs is estimated from their stages' own times " \
           f"over {link}" in out, out


def test_a_stage_without_parameters_trains_too():
    """VGG's lone ReLU or pooling layer as a stage: nothing to update, still measured."""
    with open_runner(SMALL_VGG, Setup(stages=3, batch_size=4, chunks=2), timeout=120) as r:
        run = r.measure((1, 1, 28))  # stage 1 is the first ReLU
    assert run.status == "ok", run.error
    assert run.breakdown[1].weights == run.breakdown[1].optimizer == 0


def test_a_stage_process_killed_while_starting_is_restarted():
    with open_runner(EXACT, TWO, timeout=120) as r:
        os.kill(r.worker_pids[0], signal.SIGKILL)  # before it could say it is ready
        assert r.model_info.num_layers == 4
        assert r.measure((2, 2)).status == "ok"


def test_torchrun_entry_measures_the_same_bytes(tmp_path):
    """``torchrun -m mcap.cli.spmd`` (how a run spans nodes) gives the runner's numbers."""
    import json
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-addr", "127.0.0.1", "--master-port", str(port),
           "-m", "mcap.cli.spmd", "--model", EXACT, "--balance", "1,3",
           "--batch-size", "4", "--chunks", "2"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-2000:]
    printed = json.loads(out.stdout.strip().splitlines()[-1])
    assert printed["status"] == "ok"
    for n, b in zip((1, 3), printed["breakdown"]):
        assert b["weights"] == b["gradients"] == b["optimizer"] == 4 * P * n


def test_tuple_activations_and_adam():
    """AmoebaNet's cells pass (state, skip) between stages; Adam keeps two moments."""
    setup = Setup(stages=2, batch_size=4, chunks=2, optimizer="adam", schedule="1f1b")
    with open_runner("amoebanet-d:layers=3,filters=16", setup, timeout=120) as r:
        run = r.measure((4, 5))
    assert run.status == "ok", run.error
    last = run.breakdown[1]
    # weights: parameters and BatchNorm's running statistics (counted since issue 25:
    # a deep copy's buffers used to go uncounted); gradients: the parameters' only
    from mcap.models import build_model
    layers = build_model("amoebanet-d:layers=3,filters=16").module[4:]
    params = sum(p.numel() * p.element_size() for p in layers.parameters())
    buffers = sum(b.numel() * b.element_size() for b in layers.buffers())
    assert buffers > 0 and last.weights == params + buffers
    assert last.gradients == params
    assert last.optimizer >= 2 * params


def test_a_closed_runner_refuses_to_measure():
    r = open_runner(EXACT, TWO, timeout=120)
    pids = r.worker_pids
    r.close()
    with pytest.raises(McapError, match="closed"):
        r.measure((2, 2))
    for pid in pids:  # every stage process is gone (reaped, not left running)
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
