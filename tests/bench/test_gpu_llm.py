"""bench/gpu_llm.py's arithmetic (its runs are the CLI's, tested where the CLI is)."""
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import gpu_llm  # noqa: E402


def test_the_largest_micro_batch_is_the_fullest_ranks_line_at_the_capacity():
    # rank 0: 10 + 2 per sample; rank 1: 4 + 3 per sample (measured at 1 and 2)
    low, high = [12, 7], [14, 10]
    assert gpu_llm.largest_micro_batch(low, high, 1, 2, capacity=40) == 12  # rank 1: 4+3*12=40
    assert gpu_llm.largest_micro_batch(low, high, 1, 2, capacity=39) == 11
    assert gpu_llm.largest_micro_batch(low, high, 1, 2, capacity=5) == 0   # not even one
    assert gpu_llm.largest_micro_batch([5], [5], 1, 2, capacity=40) == 0   # no growth: no line


def test_every_size_names_a_precision_and_at_least_two_stages():
    for device, (spec, stages, batch, chunks, sample, precision) in gpu_llm.SIZES.items():
        assert spec.startswith("hf:llama") and stages >= 2 and batch % chunks == 0
        assert precision == "bf16-autocast" and sample >= 2
