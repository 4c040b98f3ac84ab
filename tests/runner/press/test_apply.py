"""MPress plans measured for real (issue 16, items 1-2): ``mcap.runner.press.apply``,
``mcap.runner.press.d2d``, ``mcap.runner.press.stats`` and ``measure --press``.

One 2-stage runner of a small VGG11 (checkpoint never) serves the measured tests: a
keep-all plan reads the plain run's peaks exactly; recompute and host swap lower stage 0's
peak by about its saved activations and leave stage 1's alone; d2d lowers stage 0's as
swap does and raises stage 1's by the bytes it holds. Correctness (same loss, same
gradients as keep-all) is checked in this process, d2d through a real server thread."""
from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from torch import nn

from mcap.core.errors import McapError
from mcap.core.press.actions import LayerAction, PressPlan, keep_all
from mcap.core.setup import press_code
from mcap.core.types import Setup

# One xdist worker for the whole file: the module fixture ``measured`` (a profile and
# plans run for real) was made once in each worker when its tests were split.
pytestmark = pytest.mark.xdist_group("press-test_apply")

SPEC = "vgg11:image_size=32,hidden=64"
SETUP = Setup(stages=2, batch_size=8, chunks=4, checkpoint="never")
BALANCE = (15, 15)


def _with(plan: PressPlan, stage: int, action: str, target=None) -> PressPlan:
    stages = list(plan.stages)
    stages[stage] = tuple(LayerAction(a.layer, action, target if action == "d2d" else None)
                          for a in stages[stage])
    return dataclasses.replace(plan, stages=tuple(stages))


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    import contextlib
    import io

    from mcap.cli.main import main
    from mcap.core.types import Run
    from mcap.io.pressfile import save as save_plan
    from mcap.models import build_model
    from mcap.runner import open_runner
    from mcap.runner.press.stats import saved_bytes
    from mcap.store import Store

    keep = keep_all(SPEC, BALANCE)
    plans = {"keep": keep, "recompute": _with(keep, 0, "recompute"),
             "swap": _with(keep, 0, "swap")}
    with open_runner(SPEC, SETUP) as runner:
        runs = {"plain": runner.measure(BALANCE)}
        runs.update({name: runner.measure(BALANCE, press=p) for name, p in plans.items()})
        with pytest.raises(McapError, match="balance 15,15 but the run measures balance 14,16"):
            runner.measure((14, 16), press=keep)
        with pytest.raises(McapError, match=r"d2d.*--isolation pipeline"):
            runner.measure(BALANCE, press=_with(keep, 0, "d2d", 1))  # stages alone: no peer
    # d2d through the command line (its own stage processes; peaks are history-free)
    d2d = _with(keep, 0, "d2d", 1)
    tmp = tmp_path_factory.mktemp("press")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["measure", "--model", SPEC, "--balance", "15,15", "--batch-size", "8",
                     "--chunks", "4", "--checkpoint", "never", "--store", str(tmp / "s.sqlite"),
                     "--press", str(save_plan(d2d, tmp / "d2d.json")), "--json"])
    assert code == 0, out.getvalue()
    printed = json.loads(out.getvalue())
    assert printed["press"]["actions"]["d2d"] == 15 and printed["samples_per_second"] > 0
    runs["d2d"] = Run(BALANCE, printed["status"], tuple(printed["peaks"]), printed["seconds"])
    with Store(tmp / "s.sqlite") as store:  # stored under the plan's own study only
        info = build_model(SPEC, device="meta").info
        assert store.find_study(SPEC, SETUP) is None
        keyed = dataclasses.replace(SETUP, press=press_code(d2d))
        assert store.runs(store.find_study(SPEC, keyed))[0].peaks == runs["d2d"].peaks
        assert info.num_layers == 30
    built = build_model(SPEC)
    x, _ = built.example_batch(SETUP.batch_size // SETUP.chunks)
    saved = saved_bytes(built.module, x)
    for name, run in runs.items():
        assert run.status == "ok", (name, run.error)
    return runs, saved


@pytest.mark.integration
def test_keep_all_reads_the_plain_peaks_exactly(measured):
    runs, _ = measured
    assert runs["keep"].peaks == runs["plain"].peaks
    assert runs["keep"].breakdown == runs["plain"].breakdown


@pytest.mark.integration
def test_recompute_and_swap_lower_only_their_stage(measured):
    runs, saved = measured
    stage0 = SETUP.chunks * sum(saved[:BALANCE[0]])  # every micro-batch's, at GPipe's peak
    plain = runs["plain"].peaks
    for name in ("recompute", "swap"):
        peaks = runs[name].peaks
        assert peaks[1] == plain[1], name  # stage 1 kept everything
        # recompute keeps each segment's input and rebuilds one micro-batch in backward;
        # swap brings one back at a time: both free most of what stage 0 saved.
        assert 0.3 * stage0 < plain[0] - peaks[0] <= stage0, (name, plain[0] - peaks[0], stage0)
    assert runs["swap"].breakdown[0].weights == runs["plain"].breakdown[0].weights


@pytest.mark.integration
def test_d2d_moves_the_bytes_into_the_target_stage(measured):
    runs, saved = measured
    stage0 = SETUP.chunks * sum(saved[:BALANCE[0]])
    plain, d2d = runs["plain"].peaks, runs["d2d"].peaks
    assert d2d[0] == runs["swap"].peaks[0]  # out of stage 0 exactly as a host swap
    # The bytes live in stage 1 on stage 0's clock (put in its forward, fetched in its
    # backward), so how many are there at stage 1's own peak depends on the interleaving;
    # the last micro-batch's are there for sure: stage 0 fetches them only after stage 1's
    # last backward has sent it their gradient.
    rise = d2d[1] - plain[1]
    assert 0.8 * stage0 / SETUP.chunks <= rise <= 1.3 * stage0, (rise, stage0)


def _grads(model: nn.Sequential, stage, x, y):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # the same dropout masks (checkpoint replays the RNG state)
    loss = nn.functional.cross_entropy(stage(x), y)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_plans_leave_loss_and_gradients_unchanged(tmp_path):
    from mcap.models import build_model
    from mcap.runner.press import d2d
    from mcap.runner.press.apply import PressStage

    torch.manual_seed(0)
    built = build_model(SPEC)
    model = built.module
    x, y = built.example_batch(2)
    n = len(model)
    actions = [LayerAction(i, ("recompute", "swap", "keep", "d2d", "recompute")[i % 5],
                           1 if i % 5 == 3 else None) for i in range(n)]
    server = d2d.Server(str(tmp_path), 7, 1, 1, torch.device("cpu"))
    channels = d2d.Channels(str(tmp_path), 7, torch.device("cpu"))
    try:
        want = _grads(model, PressStage(model, [LayerAction(i) for i in range(n)], 0), x, y)
        got = _grads(model, PressStage(model, actions, 0, channels), x, y)
        held = len(server.held)
    finally:
        channels.close()
        server.wait(10)
    assert held == 0  # every d2d storage was fetched back
    assert torch.equal(want[0], got[0])
    for a, b in zip(want[1], got[1]):
        assert torch.equal(a, b)


def test_saved_bytes_count_each_storage_once_and_no_parameters():
    from mcap.runner.press.stats import saved_bytes

    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    # Linear 0 saves the input (the batch) and its weight: neither counts. ReLU saves its
    # output (3 x 8 floats); Linear 2 saves that same storage again: it counts once.
    assert saved_bytes(model, x) == [0, 3 * 8 * 4, 0]


def test_press_stats_cover_every_layer_and_bandwidths():
    from mcap.runner.press.stats import measure

    stats = measure(SPEC, SETUP, repeats=1)
    assert len(stats.saved_bytes) == len(stats.forward_seconds) == 30
    assert stats.saved_bytes[1] == 2 * 64 * 32 * 32 * 4  # relu1_1's output, micro-batch 2
    assert all(s > 0 for s in stats.forward_seconds)
    assert stats.host_bandwidth > 0 and stats.d2d_bandwidth > 0


def test_plan_code_names_every_layer_action():
    plan = _with(_with(keep_all(SPEC, BALANCE), 0, "recompute"), 1, "d2d", 0)
    assert press_code(plan) == ",".join(["r"] * 15 + ["d0"] * 15)
    assert press_code(keep_all("m", (2, 1))) == "k,k,k"


def _cli(tmp_path, plan, *extra):
    from mcap.cli.main import main
    from mcap.io.pressfile import save as save_plan
    path = save_plan(plan, tmp_path / "plan.json")
    return main(["measure", "--model", SPEC, "--balance", "15,15", "--batch-size", "8",
                 "--chunks", "4", "--store", str(tmp_path / "s.sqlite"), "--press",
                 str(path), "--json", *extra])


@pytest.mark.parametrize("plan,extra,message", [
    (keep_all(SPEC, (14, 16)), ("--checkpoint", "never"), "plan is for balance 14,16"),
    (keep_all("vgg11:image_size=64", BALANCE), ("--checkpoint", "never"), "vgg11:image_size=64"),
    (keep_all(SPEC, BALANCE), (), "checkpoint 'except_last'"),
])
def test_a_plan_that_does_not_belong_exits_2_naming_it(tmp_path, capsys, plan, extra, message):
    assert _cli(tmp_path, plan, *extra) == 2
    assert message in capsys.readouterr().err


def test_a_malformed_plan_file_exits_2(tmp_path, capsys):
    from mcap.cli.main import main
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "mcap.press/1", "model": SPEC, "balance": [15, 15],
                               "plan": [[{"layer": 0, "action": "fly"}]] * 2}))
    code = main(["measure", "--model", SPEC, "--balance", "15,15", "--checkpoint", "never",
                 "--store", str(tmp_path / "s.sqlite"), "--press", str(bad)])
    assert code == 2
    assert "expected 15 layer entries" in capsys.readouterr().err


def test_a_plan_run_is_stored_apart_from_plain_runs():
    import tempfile
    from mcap.models import build_model
    from mcap.core.types import Run
    from mcap.store import Store

    info = build_model(SPEC, device="meta").info
    plan = _with(keep_all(SPEC, BALANCE), 0, "swap")
    keyed = dataclasses.replace(SETUP, press=press_code(plan))
    with tempfile.TemporaryDirectory() as d, Store(f"{d}/s.sqlite") as store:
        store.record_run(store.study(info, keyed), Run(BALANCE, "ok", (1, 2), 1.0),
                         kind="measure")
        assert store.find_run(store.study(info, SETUP), BALANCE) is None
        assert store.find_run(store.study(info, keyed), BALANCE).peaks == (1, 2)


@pytest.mark.integration
def test_profile_press_stores_the_statistics_with_the_profile(tmp_path):
    from mcap.cli.main import main
    from mcap.io import jsonio
    from mcap.store import Store

    model = "gpt:layers=2,hidden=32,heads=2,vocab=64,seq=16"
    out = tmp_path / "p.json"
    code = main(["profile", "--model", model, "--stages", "2", "--batch-size", "4",
                 "--chunks", "2", "--checkpoint", "never", "--press", "--store",
                 str(tmp_path / "s.sqlite"), "--out", str(out)])
    assert code == 0
    prof = jsonio.load_profile(out)
    assert prof.press is not None and len(prof.press.saved_bytes) == prof.model.num_layers
    assert prof.press.saved_bytes[0] > 0  # the embedding's output, saved by the first block
    with Store(tmp_path / "s.sqlite") as store:
        assert store.load_profile(store.list_profiles()[-1].id).press == prof.press


# --- the same on CUDA (issue 30): the cuda cases skip without a GPU -----------------------

NEEDS_CUDA = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)])
GPT = "gpt:layers=4,hidden=256,heads=4,vocab=512,seq=128"  # embed, 4 blocks, head
SMALL_GPT = "gpt:layers=4,hidden=64,heads=2,vocab=128,seq=32"


def _gpt_setup(device: str) -> Setup:
    return Setup(stages=2, batch_size=8, chunks=4, checkpoint="never", device=device)


@DEVICES
def test_a_stage_moves_only_the_storages_of_its_own_device(device, monkeypatch):
    """A GPT block on CUDA saves host scalars too (scaled_dot_product_attention's RNG seed
    and offset); the stage swaps its GPU storages, leaves those in place, and trains as
    keep-all does (on the CPU every storage is the stage's own)."""
    from mcap.models import build_model
    from mcap.runner.press import apply as press
    from mcap.runner.press.apply import PressStage
    from mcap.runner.press.stats import saved_bytes

    device = torch.device(device, 0) if device == "cuda" else torch.device(device)
    built = build_model(GPT)
    model = built.module.to(device)
    x, y = built.example_batch(2)
    x, y = x.to(device), y.to(device)
    n = len(model)
    host = []

    def loss_of(stage):
        model.zero_grad(set_to_none=True)
        out = stage(x)
        loss = built.loss(out, y)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters()]

    made = press._HostCopy.__init__

    def watch(self, storage):  # the real copy, and where its storage was
        host.append(storage.device)
        made(self, storage)
    monkeypatch.setattr(press._HostCopy, "__init__", watch)
    want = loss_of(PressStage(model, [LayerAction(i) for i in range(n)], 0, device=device))
    got = loss_of(PressStage(model, [LayerAction(i, "swap") for i in range(n)], 0,
                             device=device))
    assert host and all(d == device for d in host)  # only GPU storages left the stage
    assert torch.allclose(want[0], got[0], rtol=1e-5)
    for a, b in zip(want[1], got[1]):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6)
    saved = saved_bytes(model, x)
    assert all(s > 0 for s in saved[1:-1])  # every block saves GPU activations


@pytest.mark.integration
@DEVICES
def test_d2d_of_a_gpt_moves_the_bytes_into_the_peer_stages_memory(device):
    """The H200 failed every d2d plan (``Expected a cuda device, but got: cpu``): a d2d
    swap on CUDA moves stage 0's activations into stage 1's GPU memory (CUDA IPC: stage
    1 allocates, stage 0 copies into it), counted in stage 1's peak, and back; on the CPU
    through the stage processes' tracked memory."""
    from mcap.runner import open_runner
    from mcap.models import build_model
    from mcap.runner.press.stats import saved_bytes

    setup, balance = _gpt_setup(device), (3, 3)
    keep = keep_all(GPT, balance)
    plans = {"swap": _with(keep, 0, "swap"), "d2d": _with(keep, 0, "d2d", 1)}
    # d2d moves memory between stages: they run together (a stage alone has no peer)
    with open_runner(GPT, setup, timeout=300, isolation="pipeline") as runner:
        runs = {"plain": runner.measure(balance)}
        runs.update({name: runner.measure(balance, press=p) for name, p in plans.items()})
        runs["again"] = runner.measure(balance, press=plans["d2d"])
    for name, run in runs.items():
        assert run.status == "ok", (name, run.error)
    built = build_model(GPT)
    x, _ = built.example_batch(setup.batch_size // setup.chunks)
    one = sum(saved_bytes(built.module.to(device), x.to(device))[:balance[0]])  # a micro-batch
    plain, swap, d2d = runs["plain"].peaks, runs["swap"].peaks, runs["d2d"].peaks
    assert plain[0] - d2d[0] >= one / 2, (plain, d2d, one)  # out of stage 0 ...
    assert abs(d2d[0] - swap[0]) <= 0.01 * plain[0], (swap, d2d)  # ... as a host swap
    assert _same(swap[1], plain[1], device)  # a host swap leaves stage 1 alone
    rise = d2d[1] - plain[1]  # ... into stage 1's memory: at least the last micro-batch's
    assert one / 2 <= rise <= 1.3 * setup.chunks * one, (rise, one)
    # history-free: nothing left held after a d2d run
    assert all(_same(a, b, device) for a, b in zip(runs["again"].peaks, d2d)), runs["again"]


def _same(a: int, b: int, device: str) -> bool:
    """Equal peaks: to the byte on CPU stage processes; on CUDA within 0.5%, the run-to-run
    spread the H200 still showed on last stages (up to 64 KiB, ../shared/gpu-h200 item 2),
    which is the runner's measurement to fix, not this plan's."""
    return a == b if device == "cpu" else abs(a - b) <= 0.005 * max(a, b)


@DEVICES
def test_profile_press_times_swaps_and_recomputes_where_they_run(device):
    """On the H200 every CUDA plan's predicted added time was 0.0 (issue 30). On CUDA the
    swaps, recomputes and copies are timed with CUDA events on the stream they run on, a
    swap costs at least its copies at the measured bandwidth, and a plan that swaps or
    recomputes is predicted to add time; on the CPU the same numbers are CPU seconds."""
    from mcap.core.press import problem_from
    from mcap.core.press.actions import LayerAction as A
    from mcap.core.press.model import delay
    from mcap.runner.press.stats import measure

    setup = _gpt_setup(device)
    stats = measure(SMALL_GPT, setup, repeats=3)
    blocks = range(1, 5)
    assert all(stats.saved_bytes[l] > 0 and stats.forward_seconds[l] > 0 for l in blocks)
    assert all(x >= 0 for x in stats.swap_seconds + stats.recompute_seconds)
    assert stats.host_bandwidth > 0 and stats.d2d_bandwidth > 0
    if device == "cpu":  # CPU seconds of the calling thread, as before (noise may read 0)
        assert stats.gpus is None
        return
    assert stats.gpus == min(setup.stages, torch.cuda.device_count())
    for l in blocks:  # out and back over the host link, on the compute stream
        assert stats.swap_seconds[l] >= 0.5 * 2 * stats.saved_bytes[l] / stats.host_bandwidth
        assert stats.swap_seconds[l] > 0 and stats.recompute_seconds[l] > 0
    p = problem_from(SMALL_GPT, (3, 3), (2**30, 2**30), "gpipe", setup.chunks,
                     stats.saved_bytes, stats.forward_seconds, stats.host_bandwidth,
                     stats.d2d_bandwidth, overlap=False, boundaries=stats.boundaries,
                     swap_seconds=stats.swap_seconds,
                     recompute_seconds=stats.recompute_seconds, parallel=stats.gpus)
    n = len(stats.saved_bytes)
    for action in ("swap", "recompute", "d2d"):
        actions = [A(l, action, 1 if action == "d2d" else None) if l == 2 else A(l)
                   for l in range(n)]
        assert delay(p, actions) > 0, action
