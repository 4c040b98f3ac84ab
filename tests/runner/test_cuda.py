"""The CUDA paths of the runner; skipped where there is no CUDA device. A test that also
runs on the CPU (``DEVICES``) shows there what it can of the same path."""
import ast

import pytest
import torch

from mcap.core.errors import McapError
from mcap.models.spec import trusted
from mcap.runner import open_runner
from mcap.core.types import Setup
from tests.conftest import REPO

NEEDS_CUDA = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]
# cpu and cuda: the same stage processes, trust check and history-free runs on either
DEVICES = pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=NEEDS_CUDA)])

P = 1_000_000
EXACT = trusted(f"tests.runner.toy_models:exact:params={P}")  # typed, so trusted
LINEAR = trusted("tests.runner.toy_models:linear:width=256,layers=4,scales=2")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
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


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_capacity_is_oom_and_the_next_run_works():
    setup = Setup(stages=2, batch_size=4, chunks=2, device="cuda", capacity_bytes=4 * P * 8)
    with open_runner(EXACT, setup, timeout=120) as r:
        assert r.measure((1, 3)).status == "oom"
        assert r.measure((2, 2)).status in ("ok", "oom")  # rounding may still not fit
        assert r.measure((3, 1)).status == "oom"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torchgpipe_over_the_gpus_there_are():
    found = torch.cuda.device_count()
    setup = Setup(stages=found, batch_size=4, chunks=2, device="cuda", engine="torchgpipe")
    spec = trusted(f"tests.runner.toy_models:exact:params={P},layers={2 * found}")
    with open_runner(spec, setup, timeout=120) as r:
        run = r.measure((2,) * found)
    assert run.status == "ok", run.error
    assert all(p >= 3 * 2 * 4 * P for p in run.peaks)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_torchgpipe_says_how_many_gpus_it_found():
    found = torch.cuda.device_count()
    setup = Setup(stages=found + 1, batch_size=4, chunks=2, device="cuda",
                  engine="torchgpipe")
    with pytest.raises(McapError, match=f"needs {found + 1} CUDA devices .* found {found}"):
        open_runner(EXACT, setup)


@pytest.mark.integration
@DEVICES
def test_a_stage_reads_what_a_fresh_process_reads_after_a_run_with_matmuls(device):
    """cuBLAS keeps a workspace per matmul thread (32 MiB on Hopper) in the caching
    allocator; a stage process that ran Linear layers must not carry it into the next run
    (issue 11). B's first stage holds no matmul, so a fresh process reads under 1 MiB.
    The spec names user code (a test model), so it is confirmed as a user typing it would
    (``trusted``): a plain string is data and the runner refuses it (issue 30)."""
    spec = LINEAR
    setup = Setup(stages=2, batch_size=8, chunks=2, device=device)
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
    assert machine.device == device
    if device == "cuda":
        assert machine.gpu and machine.cuda


def test_every_user_spec_a_cuda_test_opens_is_trusted():
    """The CUDA tests run only where there is a GPU, so a spec they forgot to confirm shows
    only there (issue 30: the H200 refused one). Every test file that skips without CUDA is
    read here: each string naming user code (``package.module:function``) must be the
    argument of ``trusted(...)``, as a spec typed on the command line is."""
    from mcap.models.spec import is_user_spec

    def text(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.JoinedStr):  # f"...:params={P}": the values as 0
            return "".join(v.value if isinstance(v, ast.Constant) else "0" for v in node.values)
        return None

    bad = []
    for path in sorted((REPO / "tests").rglob("test_*.py")):
        source = path.read_text()
        if "cuda.is_available" not in source:
            continue
        tree = ast.parse(source)
        confirmed = {id(c.args[0]) for c in ast.walk(tree) if isinstance(c, ast.Call)
                     and getattr(c.func, "id", None) == "trusted" and c.args}
        inner = {id(v) for f in ast.walk(tree) if isinstance(f, ast.JoinedStr) for v in f.values}
        for node in ast.walk(tree):
            value = None if id(node) in inner else text(node)
            if value and is_user_spec(value.strip()) and id(node) not in confirmed:
                bad.append(f"{path.relative_to(REPO)}:{node.lineno}: {value}")
    assert not bad, bad
