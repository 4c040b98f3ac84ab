"""The on-paper fan-out of stage-alone measurements (``mcap.core.fanout``, issue 42): list
scheduling against hand-worked cases and its bounds, and which stage tasks a profiling plan
plus a sample send."""
from __future__ import annotations

import random

import pytest

from mcap.core import fanout
from mcap.core.errors import McapError
from mcap.core.profiling.cover import stage_keys


def test_list_scheduling_by_hand():
    r = fanout.makespan([4, 3, 3, 2, 2, 2], 2)  # 4|3 ; 3->w2 at 3 ; 2->w1 at 4 ; ...
    assert (r.seconds, r.busy, r.bound) == (8.0, 16.0, 8.0) and r.speedup == 2.0
    assert fanout.makespan([5, 1, 1], 8).seconds == 5.0  # more workers than tasks
    assert fanout.makespan([], 4).seconds == 0.0
    with pytest.raises(McapError, match="workers must be >= 1"):
        fanout.makespan([1.0], 0)


def test_the_wall_time_lies_between_the_bound_and_graham_s_guarantee():
    rng = random.Random(3)
    for _ in range(200):
        tasks = [rng.uniform(0.1, 10) for _ in range(rng.randint(1, 60))]
        w = rng.randint(1, 16)
        r = fanout.makespan(tasks, w)
        assert r.bound - 1e-9 <= r.seconds <= (2 - 1 / w) * r.bound + 1e-9
        assert fanout.makespan(tasks, 1).seconds == pytest.approx(sum(tasks))


def test_a_plan_is_measured_whole_and_the_sample_adds_only_new_keys():
    plan = [(1, 1, 2), (2, 1, 1)]
    sample = [(1, 1, 2), (1, 2, 1), (2, 1, 1)]
    keys = fanout.stage_tasks(plan, sample)
    assert keys[:6] == [*stage_keys((1, 1, 2), "gpipe"), *stage_keys((2, 1, 1), "gpipe")]
    assert keys[6:] == [(1, 2, "middle")]  # (0, 0) first and (3, 3) last: measured already
    seconds = fanout.task_seconds(keys, lambda a, z: z - a + 1)
    assert seconds == [1, 1, 2, 2, 1, 1, 2]
