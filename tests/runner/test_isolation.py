"""How many stages run alone side by side (``mcap.runner.isolation.stage_slots``): on CUDA
one per GPU, every GPU for a command of many partitionings (issue 42: today's pool measured
at most one partitioning's stages at once); on the CPU one per --threads cores."""
from __future__ import annotations

import os

import pytest

from mcap.core.errors import McapError
from mcap.core.types import Setup
from mcap.runner.isolation import SLOTS_ENV, stage_slots


def test_every_gpu_measures_a_stage_at_once_for_many_partitionings(monkeypatch):
    import torch
    monkeypatch.delenv(SLOTS_ENV, raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    four = Setup(stages=4, device="cuda")
    assert stage_slots(four) == 4 and stage_slots(four, wide=True) == 8
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    assert stage_slots(four, wide=True) == 1
    cores = len(os.sched_getaffinity(0))
    cpu = Setup(stages=64)
    assert stage_slots(cpu) == stage_slots(cpu, wide=True) == min(64, cores)  # CPU: as today
    monkeypatch.setenv(SLOTS_ENV, "3")
    assert stage_slots(four, wide=True) == 3
    monkeypatch.setenv(SLOTS_ENV, "many")
    with pytest.raises(McapError, match="MCAP_STAGE_SLOTS"):
        stage_slots(four)
