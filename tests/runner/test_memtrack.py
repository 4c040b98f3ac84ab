"""The CPU memory tracker counts exactly the bytes tensor storages ask for."""
import subprocess
import sys
import textwrap

import pytest
import torch

from mcap.runner import memtrack


@pytest.fixture(scope="module", autouse=True)
def installed():
    memtrack.install()
    yield
    memtrack.set_capacity(None)


def test_counts_exact_bytes_and_frees_them():
    before = memtrack.current()
    t = torch.empty(1000, dtype=torch.uint8)
    assert memtrack.current() - before == 1000
    u = torch.empty(3, 7, dtype=torch.float64)
    assert memtrack.current() - before == 1000 + 3 * 7 * 8
    del t, u
    assert memtrack.current() == before


def test_peak_covers_freed_tensors_until_reset():
    memtrack.reset_peak()
    base = memtrack.current()
    assert memtrack.peak() == base
    t = torch.empty(4096, dtype=torch.float32)
    del t
    assert memtrack.peak() == base + 16384
    memtrack.reset_peak()
    assert memtrack.peak() == memtrack.current() == base


def test_views_and_inplace_ops_allocate_nothing():
    t = torch.zeros(256, 256)
    before = memtrack.current()
    v = t[:, :10].T
    t.add_(1.0)
    v.mul_(2.0)
    assert memtrack.current() == before


def test_capacity_raises_out_of_memory_and_counts_nothing():
    base = memtrack.current()
    memtrack.set_capacity(base + 1000)
    try:
        small = torch.empty(900, dtype=torch.uint8)
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.empty(200, dtype=torch.uint8)
        assert memtrack.is_capacity_error(info.value)
        assert f"capacity of {base + 1000} bytes" in str(info.value)
        assert memtrack.current() == base + 900
        del small
        again = torch.empty(1000, dtype=torch.uint8)  # exactly at capacity is allowed
        del again
    finally:
        memtrack.set_capacity(None)
    big = torch.empty(10**6, dtype=torch.uint8)
    assert memtrack.current() == base + 10**6
    del big


def test_capacity_must_be_positive():
    with pytest.raises(ValueError, match="-5"):
        memtrack.set_capacity(-5)


def test_suspended_allocations_are_invisible_when_made_and_when_freed():
    before = memtrack.current()
    with memtrack.suspended():
        t = torch.empty(10**5)
    assert memtrack.current() == before
    del t
    assert memtrack.current() == before


def test_breakdown_at_peak_by_category():
    memtrack.reset_peak()
    other0, weights0, grads0, optim0 = memtrack.current_breakdown()
    layer = torch.nn.Linear(100, 50)  # 5000 + 50 floats
    assert all(memtrack.retag(p, memtrack.WEIGHTS) for p in layer.parameters())
    with memtrack.tagged(memtrack.OPTIMIZER):
        state = torch.zeros(123, dtype=torch.uint8)
    temp = torch.empty(1000, dtype=torch.uint8)
    del temp
    other, weights, grads, optim = memtrack.peak_breakdown()
    assert weights - weights0 == 5050 * 4
    assert optim - optim0 == 123
    assert other - other0 == 1000
    assert other + weights + grads + optim == memtrack.peak()
    del layer, state
    assert memtrack.current_breakdown()[1] == weights0


def test_retag_refuses_storages_it_did_not_allocate():
    with memtrack.suspended():
        t = torch.empty(10)
    assert memtrack.retag(t, memtrack.WEIGHTS) is False
    with pytest.raises(RuntimeError, match="category 7"):
        memtrack.retag(torch.empty(1), 7)


def test_training_step_returns_to_the_same_bytes():
    layer = torch.nn.Linear(128, 256)
    x = torch.randn(64, 128)
    base = memtrack.current()
    memtrack.reset_peak()
    layer(x).relu().sum().backward()
    grads = sum(p.grad.nbytes for p in layer.parameters())
    assert memtrack.current() - base == grads  # activations gone, gradients kept
    # the output (64x256 floats) was alive at the same time as the input's use
    assert memtrack.peak() - base >= 64 * 256 * 4 + grads


@pytest.mark.integration
def test_tensors_from_before_install_do_not_disturb_counts():
    code = textwrap.dedent("""
        import torch
        from mcap.runner import memtrack
        early = torch.empty(10**6)
        memtrack.install()
        assert memtrack.current() == 0, memtrack.current()
        late = torch.empty(10)
        del early
        assert memtrack.current() == 40, memtrack.current()
        del late
        assert memtrack.current() == 0 and memtrack.peak() == 40
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
