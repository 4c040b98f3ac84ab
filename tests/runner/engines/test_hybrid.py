"""Engine hybrid (CAPTURE III, issue 15): data- and tensor-parallel stages run for real.

A plan must train exactly as one process training the whole model on the same
micro-batches does (the loss of both iterations equal: the second also checks the
gradients and the update), and report one history-free peak per device. Tiny models,
2 iterations each; one runner serves every plan of one device count.

The training checks run the devices together (isolation ``pipeline``): a device run alone
(the default, tests/runner/capture/test_alone.py) computes on data no other device sent, so it
reports no loss."""
from __future__ import annotations

import json

import pytest

from mcap.core.errors import InvalidPartitioning, McapError
from mcap.core.capture.plan import parse_plan, plan_from_store, store_engine
from mcap.core.types import Setup
from mcap.runner import open_runner

GPT = "gpt:layers=2,hidden=32,heads=2,vocab=64,seq=8"  # embed, block1, block2, head
VGG = "vgg11:image_size=32,hidden=64"  # 30 layers; the dropouts are layers 25 and 28
B, C = 8, 2

# One xdist worker for the whole file: the module fixtures (a 3-device runner, the
# reference losses) were made once in each worker when the tests sharing them were split.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("engines-test_hybrid")]


def reference_losses(spec: str, batch: int = B, chunks: int = C) -> list[float]:
    """One process, the whole model, the same micro-batches, seed and optimizer; its layers
    materialised from the meta model as every stage process builds its own (the values of a
    layer do not depend on which stage builds it: mcap.models.stage)."""
    import torch

    from mcap.models.build import BuiltModel
    from mcap.models.stage import materialise, meta_model
    from mcap.runner.capture.device import SEED
    from mcap.runner.train import make_optimizer

    meta, example_batch, loss, info = meta_model(spec)
    built = BuiltModel(materialise(meta, 0, len(meta) - 1, "cpu"), example_batch, loss, info)
    x, y = built.example_batch(batch)
    torch.manual_seed(SEED)
    opt = make_optimizer(Setup(stages=1), built.module.parameters())
    out = []
    for _ in range(2):
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for i in range(chunks):
            rows = slice(i * batch // chunks, (i + 1) * batch // chunks)
            loss = built.loss(built.module(x[rows]), y[rows]) / chunks
            loss.backward()
            total += float(loss.detach())
        opt.step()
        out.append(total)
    return out


def _losses(runner) -> list[float]:
    got = [r.losses for r in runner.last_results if r.losses]
    assert len(got) == 1, runner.last_results
    return list(got[0])


@pytest.fixture(scope="module")
def gpt_reference():
    return reference_losses(GPT)


@pytest.fixture(scope="module")
def gpt3():
    with open_runner(GPT, Setup(stages=3, batch_size=B, chunks=C, engine="hybrid"),
                     timeout=120, isolation="pipeline") as runner:
        yield runner


@pytest.mark.parametrize("plan", ["2,2:dp2", "2,2:tp2", "2:dp2,2", "2:tp2,2"])
def test_mixed_plans_train_as_one_process_does(gpt3, gpt_reference, plan):
    run = gpt3.measure_plan(plan)
    assert run.status == "ok", run.error
    assert len(run.peaks) == 3 and all(p > 0 for p in run.peaks)
    assert run.balance == parse_plan(plan).balance
    assert _losses(gpt3) == pytest.approx(gpt_reference, rel=1e-5)


def test_parallel_devices_hold_their_share_of_the_weights(gpt3):
    info = gpt3.model_info
    last_two = sum(layer.param_bytes for layer in info.layers[2:])
    run = gpt3.measure_plan("2,2:dp2")
    dp = [b.weights for b in run.breakdown[1:]]
    assert dp == [last_two, last_two]  # data parallel: every device a whole replica
    assert run.peaks[1] == run.peaks[2]  # equal shares of every micro-batch
    again = gpt3.measure_plan("2,2:dp2")
    assert again.peaks == run.peaks  # history-free, as every engine
    run = gpt3.measure_plan("2,2:tp2")
    tp = [b.weights for b in run.breakdown[1:]]
    # Tensor parallel: the Linears' weights are halved; norms and the biases of
    # row-parallel Linears stay whole on both devices.
    assert tp[0] == tp[1] and 0.45 * last_two < tp[0] < 0.6 * last_two


def test_two_device_stages():
    ref = reference_losses(GPT)
    with open_runner(GPT, Setup(stages=2, batch_size=B, chunks=C, engine="hybrid"),
                     timeout=120, isolation="pipeline") as runner:
        for plan in ("4:dp2", "4:tp2"):
            run = runner.measure_plan(plan)
            assert run.status == "ok", run.error
            assert len(run.peaks) == 2 and run.peaks[0] > 0
            assert _losses(runner) == pytest.approx(ref, rel=1e-5)
        run = runner.measure((1, 3))  # a plain balance is a pipeline-only plan
        assert run.status == "ok" and _losses(runner) == pytest.approx(ref, rel=1e-5)
        with pytest.raises(InvalidPartitioning, match="uses 3 devices but this runner has 2"):
            runner.measure_plan("2,2:dp2")
        with pytest.raises(InvalidPartitioning, match="places 5 layers but the model has 4"):
            runner.measure_plan("5:dp2")


def test_vgg_data_parallel_convolutions():
    # The dropouts stay in the pipeline stage: a data-parallel device draws the mask of
    # its share only, which one process drawing it for the whole batch cannot repeat.
    ref = reference_losses(VGG)
    with open_runner(VGG, Setup(stages=4, batch_size=B, chunks=C, engine="hybrid"),
                     timeout=120, isolation="pipeline") as runner:
        run = runner.measure_plan("20:dp2,9,1")
        assert run.status == "ok", run.error
        assert len(run.peaks) == 4 and run.peaks[0] == run.peaks[1]
        assert _losses(runner) == pytest.approx(ref, rel=1e-5)
        # a dp stage without parameters (relu1_1 alone): nothing to all-reduce, no DDP
        run = runner.measure_plan("1,1:dp2,28")
        assert run.status == "ok", run.error
        assert _losses(runner) == pytest.approx(ref, rel=1e-5)


def test_store_engine_round_trip():
    plan = parse_plan("3,3,10:tp2,4:dp4")
    assert store_engine(plan) == "hybrid:pp,pp,tp2,dp4"
    assert plan_from_store(store_engine(plan), plan.balance) == plan
    assert plan_from_store("pipelining", (1, 2)) is None


def _mcap(capsys, *args):
    """``python -m mcap ARGS`` in this process (the stage processes are its children)."""
    from mcap.cli.main import main
    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("args, message", [
    (["--plan", "1,2:tp2,2"], "plan 1,2:tp2,2 places 5 layers but the model has 4"),
    (["--plan", "1,3", "--balance", "1,3"], "not allowed with argument"),
    (["--plan", "1:dp4,3", "--chunks", "4"], "micro-batch size 2 (batch 8 / 4 chunks) is not "
                                             "divisible by its degree 4"),
    (["--plan", "1,3:xp2"], "stage 1 is '3:xp2'"),
    (["--plan", "1,3:tp2", "--engine", "pipelining"], "runs on engine hybrid"),
])
def test_measure_refuses_bad_plans_naming_the_numbers(tmp_path, capsys, args, message):
    code, _, err = _mcap(capsys, "measure", "--model", GPT, "--batch-size", "8", "--store",
                         tmp_path / "s.sqlite", *args)
    assert code == 2, err
    assert message in err and "Traceback" not in err


def test_measure_plan_json_and_store(tmp_path, capsys):
    from mcap.store import Store

    store = tmp_path / "s.sqlite"
    with Store(store) as s:  # as the dashboard launches it (mcap.app.jobs)
        job = s.create_job("measure", ["--plan", "2,2:tp2"], total=1)
    code, out, err = _mcap(capsys, "measure", "--model", GPT, "--plan", "2,2:tp2",
                           "--batch-size", "8", "--chunks", "2", "--json", "--store", store,
                           "--job", job)
    assert code == 0, err
    got = json.loads(out)
    assert got["status"] == "ok" and len(got["peaks"]) == 3
    assert got["plan_text"] == "2,2:tp2" and got["plan"][1] == {"layers": 2, "parallel": "tp",
                                                                 "degree": 2}
    with Store(store) as s:
        studies = s.list_studies()
        assert [st.setup.engine for st in studies] == ["hybrid:pp,tp2"]
        (run,) = s.runs(studies[0].id)
        assert s.job(job).status == "done" and s.job(job).done == 1
        assert [r.run for r in s.job_runs(job)] == [run]
    assert run.balance == (2, 2)
    assert run.peaks == (got["peaks"][0], max(got["peaks"][1:]))  # one per stage


@pytest.mark.skipif("not __import__('torch').cuda.is_available() or "
                    "__import__('torch').cuda.device_count() < 3")
def test_cuda_mixed_plan():
    ref = reference_losses(GPT)
    with open_runner(GPT, Setup(stages=3, batch_size=B, chunks=C, engine="hybrid",
                                device="cuda"), timeout=120, isolation="pipeline") as runner:
        for plan in ("2,2:dp2", "2,2:tp2"):
            run = runner.measure_plan(plan)
            assert run.status == "ok", run.error
            assert len(run.peaks) == 3
            assert _losses(runner) == pytest.approx(ref, rel=1e-4)
