"""The CUDA paths of the runner; skipped where there is no CUDA device."""
import pytest
import torch

from mcap.core.errors import McapError
from mcap.models.spec import trusted
from mcap.runner import open_runner
from mcap.core.types import Setup

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

P = 1_000_000
EXACT = trusted(f"tests.test_runner_models:exact:params={P}")  # typed, so trusted


def test_pipelining_stages_on_cuda_read_their_own_allocator():
    """Both stage processes may share one GPU; each reports its own max_memory_allocated."""
    setup = Setup(stages=2, batch_size=4, chunks=2, device="cuda")
    with open_runner(EXACT, setup, timeout=120) as r:
        run = r.measure((1, 3))
        again = r.measure((1, 3))
    assert run.status == "ok", run.error
    # weights + gradients + momentum of each stage at least; the allocator rounds up
    assert run.peaks[0] >= 3 * 4 * P and run.peaks[1] >= 3 * 3 * 4 * P
    assert run.peaks[1] > run.peaks[0]
    assert again.peaks == run.peaks


def test_cuda_capacity_is_oom_and_the_next_run_works():
    setup = Setup(stages=2, batch_size=4, chunks=2, device="cuda", capacity_bytes=4 * P * 8)
    with open_runner(EXACT, setup, timeout=120) as r:
        assert r.measure((1, 3)).status == "oom"
        assert r.measure((2, 2)).status in ("ok", "oom")  # rounding may still not fit
        assert r.measure((3, 1)).status == "oom"


def test_torchgpipe_over_the_gpus_there_are():
    found = torch.cuda.device_count()
    setup = Setup(stages=found, batch_size=4, chunks=2, device="cuda", engine="torchgpipe")
    spec = trusted(f"tests.test_runner_models:exact:params={P},layers={2 * found}")
    with open_runner(spec, setup, timeout=120) as r:
        run = r.measure((2,) * found)
    assert run.status == "ok", run.error
    assert all(p >= 3 * 2 * 4 * P for p in run.peaks)


def test_torchgpipe_says_how_many_gpus_it_found():
    found = torch.cuda.device_count()
    setup = Setup(stages=found + 1, batch_size=4, chunks=2, device="cuda",
                  engine="torchgpipe")
    with pytest.raises(McapError, match=f"needs {found + 1} CUDA devices .* found {found}"):
        open_runner(EXACT, setup)


def test_a_stage_reads_what_a_fresh_process_reads_after_a_run_with_matmuls():
    """cuBLAS keeps a workspace per matmul thread (32 MiB on Hopper) in the caching
    allocator; a stage process that ran Linear layers must not carry it into the next run
    (issue 11). B's first stage holds no matmul, so a fresh process reads under 1 MiB."""
    spec = "tests.test_runner_models:linear:width=256,layers=4,scales=2"
    setup = Setup(stages=2, batch_size=8, chunks=2, device="cuda")
    a, b = (3, 1), (2, 2)  # stage 0 of a runs a Linear forward and backward, of b none
    with open_runner(spec, setup, timeout=120) as r:
        first_a = r.measure(a)
        b_after_a = r.measure(b)
        a_after_b = r.measure(a)
        machine = r.machine
    with open_runner(spec, setup, timeout=120) as fresh:
        b_fresh = fresh.measure(b)
    for run in (first_a, b_after_a, a_after_b, b_fresh):
        assert run.status == "ok", run.error
    assert b_fresh.peaks[0] < 2**20
    assert b_after_a.peaks == b_fresh.peaks
    assert a_after_b.peaks == first_a.peaks
    assert machine.device == "cuda" and machine.gpu and machine.cuda
