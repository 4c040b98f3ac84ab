"""Stages measured alone (issue 25): each stage in its own process, with the real runtime
over a process group that moves no data (mcap.runner.alone), reads on the CPU exactly the
bytes it reads in a concurrent run of the whole pipeline, whatever ran before it.

Concurrent runs here are the gloo pipelines every CPU measurement used before; the
tracker counts tensor storages, so equal bytes mean the stage allocated the same tensors
at the same moments (weights, gradients, optimizer state, activations of every
micro-batch in flight, receive buffers, the tensors its sends hold).
"""
import copy

import pytest
import torch

from mcap.core.types import Setup
from mcap.runner import open_runner

pytestmark = pytest.mark.integration

VGG = "vgg11:image_size=32,hidden=64"
GPT = "gpt:layers=4,hidden=64,heads=2,vocab=64,seq=16"
AMOEBA = "amoebanet-d:layers=3,filters=8,image_size=32"


def _measure(spec, setup, balances, isolation):
    with open_runner(spec, setup, timeout=300, isolation=isolation) as runner:
        runs = [runner.measure(b) for b in balances]
        machine = runner.machine
    for r in runs:
        assert r.status == "ok", r.error
    return runs, machine


@pytest.mark.parametrize("spec,balance,schedule", [
    (VGG, (16, 2, 8, 4), "gpipe"),
    (GPT, (2, 2, 2), "1f1b"),
    (AMOEBA, (3, 4, 2), "gpipe"),
])
def test_first_middle_and_last_stage_alone_read_the_concurrent_bytes(spec, balance, schedule):
    setup = Setup(stages=len(balance), batch_size=8, chunks=4, schedule=schedule)
    (alone,), m_alone = _measure(spec, setup, [balance], "stage")
    (together,), m_together = _measure(spec, setup, [balance], "pipeline")
    assert alone.peaks == together.peaks  # first, middle(s) and last stage, to the byte
    assert alone.breakdown == together.breakdown
    # the same meter: runs of either isolation are one machine's, reusable for each other
    assert m_alone == m_together and m_alone.meter == "memtrack/2"
    # stages run alone record their own times and boundary bytes; the run's throughput
    # is an estimate from them, and says so
    assert alone.estimated and not together.estimated
    assert alone.samples_per_second and alone.samples_per_second > 0
    G = len(balance)
    for s, t in enumerate(alone.times):
        assert len(t.forward) == len(t.backward) == len(t.step) == len(t.other) == 2
        assert all(o >= 0 for o in t.other)  # the schedule's work around them
        assert all(len(f) == setup.chunks and all(x > 0 for x in f) for f in t.forward)
        assert (t.recv_bytes == 0) == (s == 0) and (t.send_bytes == 0) == (s == G - 1)
    for s in range(G - 1):  # what one stage sends, the next receives
        assert alone.times[s].send_bytes == alone.times[s + 1].recv_bytes
    # the measured memory timeline (issue 26): its events cover the whole window, so the
    # highest peak inside them is the stage's peak, to the byte; each event starts where
    # the last ended; every forward, backward and step of both iterations is there
    for s, t in enumerate(alone.times):
        assert max(e[4] for e in t.memory) == alone.peaks[s]
        assert all(a[5] == b[3] for a, b in zip(t.memory, t.memory[1:]))
        assert all(e[3] <= e[4] and e[5] <= e[4] for e in t.memory)
        ops = [(k, it, mb) for k, it, mb, *_ in t.memory if k != "-"]
        assert sorted(ops) == sorted([(k, it, mb) for it in range(2) for k in "FB"
                                      for mb in range(setup.chunks)] +
                                     [("S", it, -1) for it in range(2)])


def test_a_stage_alone_reads_the_same_after_any_other_stage():
    """Reorder: stage keys measured alone after different other stages (and in another
    process slot), and in a concurrent run, read the same bytes."""
    setup = Setup(stages=3, batch_size=8, chunks=2)
    order = [(10, 10, 10), (4, 20, 6), (10, 10, 10), (20, 4, 6), (4, 20, 6)]
    alone, _ = _measure(VGG, setup, order, "stage")
    assert alone[0].peaks == alone[2].peaks and alone[1].peaks == alone[4].peaks
    # stage 2 (layers 24..29) is the same stage key in three partitionings
    assert alone[1].peaks[2] == alone[3].peaks[2] == alone[4].peaks[2]
    together, _ = _measure(VGG, setup, [(4, 20, 6), (10, 10, 10)], "pipeline")
    assert together[0].peaks == alone[1].peaks and together[1].peaks == alone[0].peaks


def test_measure_stages_runs_only_the_stages_asked_for():
    setup = Setup(stages=4, batch_size=8, chunks=2)
    with open_runner(VGG, setup, timeout=300) as runner:
        whole = runner.measure((16, 2, 8, 4))
        seen = []
        some = runner.measure_stages([((16, 2, 8, 4), 2), ((16, 2, 8, 4), 0)], seen.append)
        assert runner.isolation == "stage"
    assert [r.stage for r in some] == [2, 0]
    assert [r.status for r in some] == ["ok", "ok"]
    assert (some[0].peak, some[1].peak) == (whole.peaks[2], whole.peaks[0])
    assert sorted(r.stage for r in seen) == [0, 2]  # each reported as it ended
    assert len(some[0].times.forward) == 2  # both iterations timed
    assert (some[0].times.recv_bytes, some[0].times.send_bytes) == \
        (whole.times[2].recv_bytes, whole.times[2].send_bytes)


def test_a_stage_over_the_capacity_is_an_oom_record_and_the_next_runs():
    setup = Setup(stages=2, batch_size=8, chunks=2, capacity_bytes=16 << 20)
    with open_runner(VGG, setup, timeout=300) as runner:
        oom = runner.measure((2, 28))  # about 6 MiB and 130 MiB
        small = runner.measure_stages([((2, 28), 0), ((2, 28), 1)])
        again = runner.measure((2, 28))
    assert oom.status == "oom" and "stage 1" in oom.error and "stage 0" not in oom.error
    assert small[0].status == "ok" and small[0].peak < 16 << 20  # the oom stage told alone
    assert small[1].status == "oom"
    assert again.status == "oom" and again.error == oom.error
    # A process that ran out of memory is replaced (what the failed run held may stay
    # referenced): every slot then reads what a fresh process reads.
    with open_runner(VGG, setup, timeout=300) as fresh:
        first = fresh.measure_stages([((2, 28), 0)])[0]
    with open_runner(VGG, setup, timeout=300) as runner:
        runner.measure((2, 28))
        after = runner.measure_stages([((2, 28), 0), ((4, 26), 0), ((2, 28), 0)])
    assert after[0].peak == after[2].peak == first.peak


def test_deep_copies_are_counted():
    """copy.deepcopy of a plain tensor allocates through c10's default CPU allocator,
    not the registered one; the tracker counts it anyway (issue 25: BatchNorm's running
    statistics of a copied stage went uncounted)."""
    from mcap.runner import memtrack
    memtrack.install()
    before = memtrack.current()
    t = torch.arange(1000, dtype=torch.float32)
    c = copy.deepcopy(t)
    assert memtrack.current() - before == 8000 and torch.equal(c, t)
    bn = torch.nn.BatchNorm2d(10)
    held = memtrack.current()
    copied = copy.deepcopy(bn)
    assert memtrack.current() - held == sum(x.numel() * x.element_size() for x in
                                            list(bn.parameters()) + list(bn.buffers()))
    del c, copied
    assert memtrack.current() - before == 4000 + 168


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_stages_alone_on_cuda_repeat_side_by_side_and_agree_with_the_concurrent_run(
        monkeypatch):
    """On one GPU: a stage alone reads the same bytes after other stages and whether the
    stages run one after another or side by side (each process reads its own allocator);
    the concurrent run over CUDA IPC reads within 0.5% of it (issue 25)."""
    setup = Setup(stages=4, batch_size=8, chunks=4, device="cuda")
    order = [(16, 2, 8, 4), (4, 20, 2, 4), (16, 2, 8, 4)]
    monkeypatch.setenv("MCAP_STAGE_SLOTS", "1")
    one, m = _measure(VGG, setup, order, "stage")
    monkeypatch.setenv("MCAP_STAGE_SLOTS", "4")
    side, _ = _measure(VGG, setup, order, "stage")
    assert one[0].peaks == one[2].peaks == side[0].peaks == side[2].peaks
    assert one[1].peaks[3] == one[0].peaks[3]  # stage 26..29 in both partitionings
    assert m.meter == "cuda/alone"
    monkeypatch.setenv("MCAP_EXCHANGE", "ipc")
    together, t = _measure(VGG, setup, order[:1], "pipeline")
    assert t.meter == "cuda/pipeline-ipc"
    for a, b in zip(one[0].peaks, together[0].peaks):
        assert abs(a - b) <= 0.005 * a, (one[0].peaks, together[0].peaks)
