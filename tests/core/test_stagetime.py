"""Throughput from the times of stages run alone (issue 25, item 2; mcap.core.stagetime):
the schedule's own op order, the replay's arithmetic on cases with a closed form, and the
times' round trip through the JSON files and the store."""
import json
import subprocess
import sys

import pytest

from mcap.core.errors import McapError
from mcap.core.stagetime import Link, makespan, op_order, samples_per_second
from mcap.core.types import ModelInfo, Layer, Run, Setup, StageRun, StageTimes, Sweep
from tests.conftest import REPO


_TORCH_ORDER = r"""
import json
import torch
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe
from mcap.runner import alone
out = {}
for name, cls in (("gpipe", ScheduleGPipe), ("1f1b", Schedule1F1B)):
    for G, M in ((2, 2), (3, 5), (4, 4), (4, 8), (3, 3), (2, 7)):
        ranks = []
        for s in range(G):
            alone.join(s, G)
            stage = PipelineStage(torch.nn.Linear(2, 2), s, G, torch.device("cpu"),
                                  input_args=torch.empty(1, 2, requires_grad=s > 0),
                                  output_args=torch.empty(1, 2, requires_grad=True))
            sched = cls(stage, M, loss_fn=lambda o, t: o.sum())
            alone.set_vote(sched, stage)
            seen = []
            fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk
            stage.forward_one_chunk = lambda i, *a, **k: (seen.append(("F", i)), fwd(i, *a, **k))[1]
            stage.backward_one_chunk = lambda i, *a, **k: (seen.append(("B", i)), bwd(i, *a, **k))[1]
            args = (torch.ones(M, 2),) if s == 0 else ()
            kwargs = {"target": torch.ones(M, 2)} if s == G - 1 else {}
            sched.step(*args, **kwargs)
            ranks.append(seen)
        out[f"{name} {G} {M}"] = ranks
alone.leave()
print(json.dumps(out))
"""


@pytest.mark.integration
def test_op_order_is_what_the_schedules_run():
    """ScheduleGPipe's and Schedule1F1B's runtime order, recorded rank by rank from the
    stages' own forward/backward calls (for 1F1B torch's ``pipeline_order`` IR disagrees
    with its runtime, e.g. the last stage of G=2, M=2 lists a micro-batch 2)."""
    done = subprocess.run([sys.executable, "-c", _TORCH_ORDER], capture_output=True, text=True,
                          cwd=REPO, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    torch_orders = json.loads(done.stdout.strip().splitlines()[-1])
    for key, ranks in torch_orders.items():
        name, G, M = key.split()
        assert op_order(name, int(G), int(M)) == [[tuple(op) for op in r] for r in ranks], key


def _times(G, M, f=1.0, b=2.0, step=0.5, its=1, nbytes=0):
    return [StageTimes(((f,) * M,) * its, ((b,) * M,) * its, (step,) * its,
                       recv_bytes=0 if s == 0 else nbytes,
                       send_bytes=0 if s == G - 1 else nbytes) for s in range(G)]


@pytest.mark.parametrize("G,M", [(1, 1), (2, 4), (4, 4), (4, 8)])
def test_gpipe_on_devices_of_their_own_fills_and_drains(G, M):
    """Equal stages, free links: (M + G - 1) forward slots, as many backward ones, a step."""
    free = Link(0.0, 1e12)
    assert makespan(_times(G, M), "gpipe", M, free) == pytest.approx((M + G - 1) * 3.0 + 0.5)


def test_the_link_delays_every_crossing():
    G, M, nbytes = 3, 1, 10**6
    link = Link(latency=0.01, bytes_per_second=1e8)  # 0.02 s per crossing
    base = makespan(_times(G, M), "gpipe", M, Link(0.0, 1e12))
    assert makespan(_times(G, M, nbytes=nbytes), "gpipe", M, link) == \
        pytest.approx(base + 2 * (G - 1) * 0.02)  # down and back up


def test_stages_sharing_one_device_take_turns():
    """One compute slot: the pipeline is no faster than all its work in a row."""
    G, M = 4, 4
    one = Link(0.0, 1e12, slots=1)
    total = G * (M * 3.0 + 0.5)
    assert makespan(_times(G, M), "gpipe", M, one) == pytest.approx(total)
    two = makespan(_times(G, M), "1f1b", M, Link(0.0, 1e12, slots=2))
    assert total / 2 <= two < total


def test_iterations_follow_each_other_and_throughput_counts_them():
    G, M = 2, 2
    setup = Setup(stages=G, batch_size=8, chunks=M)
    free = Link(0.0, 1e12)
    one = makespan(_times(G, M, its=1), "gpipe", M, free)
    two = makespan(_times(G, M, its=2), "gpipe", M, free)
    # stage 0 ends an iteration last (the final backward reaches it last), so iteration
    # 2 cannot start before iteration 1 has drained everywhere
    assert two == pytest.approx(2 * one)
    assert samples_per_second(_times(G, M, its=2), setup, free) == pytest.approx(16 / two)


def test_bad_times_are_refused_with_the_values():
    with pytest.raises(McapError, match="another number of micro-batches than 3"):
        makespan(_times(2, 2), "gpipe", 3, Link(0.0, 1e12))
    with pytest.raises(McapError, match="schedule 'zb'"):
        op_order("zb", 2, 2)


def test_times_survive_the_json_file_and_the_store(tmp_path):
    from mcap.io import jsonio
    from mcap.store import Store

    model = ModelInfo("vgg11:image_size=32", tuple(Layer(f"l{i}", 4) for i in range(4)))
    setup = Setup(stages=2, batch_size=4, chunks=2)
    times = tuple(_times(2, 2, its=2, nbytes=4096))
    times = (times[0], StageTimes(times[1].forward, times[1].backward, times[1].step,
                                  times[1].recv_bytes, times[1].send_bytes, (0.01, 0.02),
                                  (("-", 0, -1, 10, 40, 20), ("F", 0, 0, 20, 200, 150))))
    run = Run((1, 3), "ok", (100, 200), 1.5, samples_per_second=3.25, times=times,
              estimated=True)
    sweep = Sweep(model, setup, (run, Run((2, 2), "ok", (5, 6), 1.0)))
    jsonio.save(sweep, tmp_path / "s.json")
    assert jsonio.load_sweep(tmp_path / "s.json").runs == sweep.runs
    with Store(tmp_path / "store.sqlite") as store:
        study = store.study(model, setup)
        store.record_run(study, run)
        assert store.runs(study) == (run,)
        alone = StageRun((1, 3), 1, "ok", 200, 0.5, times[1])
        store.record_stage(study, alone)
        store.record_stage(study, StageRun((1, 3), 0, "oom", None, 0.1, error="stage 0: oom"))
        assert store.stage_runs(study) == (alone, StageRun((1, 3), 0, "oom", None, 0.1,
                                                           error="stage 0: oom"))
        with pytest.raises(McapError, match="stage 2 is not a stage of balance"):
            store.record_stage(study, StageRun((1, 3), 2, "ok", 1))
    bad = json.loads((tmp_path / "s.json").read_text())
    bad["runs"][0]["times"][0]["forward"][0][0] = -1
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(McapError, match=r"runs\[0\]\.times\[0\]\.forward\[0\]\[0\]"):
        jsonio.load_sweep(tmp_path / "bad.json")


def test_the_schedules_other_work_goes_with_the_forwards_and_backwards():
    """An iteration's ``other`` seconds (receives, sends, the loss, the schedule's Python)
    lengthen its forwards and backwards in proportion: with equal stages and free links
    the makespan grows by the same factor as each op."""
    G, M = 3, 2
    base = _times(G, M)
    busy = [StageTimes(t.forward, t.backward, t.step, t.recv_bytes, t.send_bytes,
                       other=(0.5 * (sum(t.forward[0]) + sum(t.backward[0])),)) for t in base]
    free = Link(0.0, 1e12)
    assert makespan(busy, "gpipe", M, free) == pytest.approx((M + G - 1) * 3.0 * 1.5 + 0.5)


def test_a_crossing_on_the_shared_compute_is_work_not_a_delay():
    """gloo between processes of one host copies through the kernel on the cores the
    stages share: the crossing takes a share of them like compute does; NCCL between GPUs
    of their own only delays the receiver."""
    G, M, nbytes = 2, 1, 10**6
    ts = _times(G, M, f=1.0, b=1.0, step=0.0, nbytes=nbytes)
    one_ms = dict(latency=0.0, bytes_per_second=1e9)  # 1 ms per crossing
    delay = makespan(ts, "gpipe", M, Link(**one_ms, how="nccl"))
    work = makespan(ts, "gpipe", M, Link(**one_ms, how="gloo"))
    assert delay == pytest.approx(work) == pytest.approx(4.0 + 0.002)
    assert Link(**one_ms, how="gloo").on_compute and not Link(**one_ms, how="nccl").on_compute
    # on one shared slot the crossing competes with compute; as a delay it would not
    shared = makespan(_times(3, 2, nbytes=nbytes), "gpipe", 2,
                      Link(**one_ms, how="gloo", slots=1))
    assert shared == pytest.approx(3 * (2 * 3.0 + 0.5) + 8 * 0.001)


def test_stages_computing_side_by_side_slow_each_other_as_measured():
    """``Link.corun`` (measured by mcap.runner.corun): with n stages computing at once, each
    op takes ``corun[n - 1]`` times its own seconds, on top of sharing the slots."""
    times = [StageTimes(((1.0, 1.0),), ((0.0, 0.0),), (0.0,)) for _ in range(2)]
    free = Link(0.0, 1e12)
    assert makespan(times, "gpipe", 2, free) == pytest.approx(3.0)
    # stage 0's second forward and stage 1's first run side by side: 2 s each at factor 2
    assert makespan(times, "gpipe", 2, Link(0.0, 1e12, corun=(1.0, 2.0))) == pytest.approx(4.0)
    # factors of 1 change nothing; more stages computing than factors measured: the last
    assert makespan(times, "gpipe", 2, Link(0.0, 1e12, corun=(1.0, 1.0))) == pytest.approx(3.0)
    assert makespan(times, "gpipe", 2, Link(0.0, 1e12, corun=(1.0,))) == pytest.approx(3.0)
    # on one shared slot both apply: the side-by-side second takes 1 / (0.5 / 2) = 4 s
    assert makespan(times, "gpipe", 2, Link(0.0, 1e12, slots=1)) == pytest.approx(4.0)
    assert makespan(times, "gpipe", 2, Link(0.0, 1e12, slots=1, corun=(1.0, 2.0))) \
        == pytest.approx(6.0)
    # one stage alone never has a neighbour
    one = _times(1, 2)
    assert makespan(one, "gpipe", 2, Link(0.0, 1e12, corun=(1.0, 3.0))) \
        == makespan(one, "gpipe", 2, free)


def test_a_sweeps_link_survives_json_and_hostile_values_are_refused():
    """The link a sweep's stage-time estimates were made over rides in the sweep
    (``stagetime.KEY``) so the dashboard can name it; a file is data, so anything but plain
    numbers and a plain word reads as no link at all (the page then names none)."""
    from mcap.core import stagetime
    link = Link(115e-6, 2.27e9, "gloo", 2, (1.0, 1.06, 1.12, 1.14))
    back = stagetime.link_from_json(json.loads(json.dumps(stagetime.link_to_json(link))))
    assert back == link
    assert "gloo 115 us + 2.27 GB/s" in stagetime.describe(back)
    assert "2 compute slots shared" in stagetime.describe(back)
    assert "1.00 / 1.06 / 1.12 / 1.14" in stagetime.describe(back)
    assert "a device per stage" in stagetime.describe(Link(1e-5, 1e10, "nccl"))
    good = stagetime.link_to_json(link)
    for key, bad in (("how", "<b>x</b>"), ("how", "os:system"), ("how", 3), ("latency", -1.0),
                     ("latency", float("nan")), ("latency", float("inf")), ("latency", True),
                     ("latency", "1"), ("bytes_per_second", 0), ("bytes_per_second", None),
                     ("slots", -1), ("slots", 2.5), ("slots", True), ("corun", [1.0, "x"]),
                     ("corun", [0.0]), ("corun", [1.0] * 2000), ("corun", {"a": 1})):
        assert stagetime.link_from_json({**good, key: bad}) is None, (key, bad)
    for bad in (None, [], "gloo", 1e400, {"how": "gloo"}):
        assert stagetime.link_from_json(bad) is None
