"""Which rows of a micro-batch each device of a hybrid stage computes and sends on
(``mcap.core.capture.plan``, used by engine hybrid), and the micro-batch check."""
from __future__ import annotations

import pytest

from mcap.core.errors import McapError
from mcap.core.capture.plan import (
    StageConfig, as_plan, check_micro_batches, holder_rows, need_rows, parse_plan,
)


def test_data_parallel_devices_take_equal_shares():
    dp = StageConfig(4, "dp", 4)
    assert holder_rows(dp, 8) == ((0, 2), (2, 4), (4, 6), (6, 8))
    assert [need_rows(dp, 8, j) for j in range(4)] == list(holder_rows(dp, 8))


def test_pipeline_and_tensor_stages_compute_every_row_and_device_0_sends():
    tp = StageConfig(4, "tp", 2)
    assert holder_rows(tp, 8) == ((0, 8), (0, 0))
    assert need_rows(tp, 8, 1) == (0, 8)
    assert holder_rows(StageConfig(3), 8) == ((0, 8),)


def test_micro_batches_must_split_evenly():
    plan = parse_plan("1,2:dp2,1:tp4")
    assert check_micro_batches(plan, 8, 2) == 4
    with pytest.raises(McapError, match="batch size 9 does not split into 2"):
        check_micro_batches(plan, 9, 2)
    with pytest.raises(McapError, match=r"stage 1 is 2:dp2 but the micro-batch size 3 \(batch "
                                        r"6 / 2 chunks\) is not divisible by its degree 2"):
        check_micro_batches(plan, 6, 2)


def test_a_balance_is_a_pipeline_only_plan():
    assert as_plan((1, 3)) == parse_plan("1,3")
    assert as_plan(parse_plan("2:tp2,2").stages) == parse_plan("2:tp2,2")
