"""What devices this machine has, without importing torch in the dashboard server: the
NVIDIA driver lists its GPUs under /proc/driver/nvidia/gpus; CUDA_VISIBLE_DEVICES narrows
them as it does for the stage processes. The profiling job itself checks again with torch
and refuses a device it cannot use."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")


def gpu_count(root: Path = NVIDIA_GPUS) -> int:
    try:
        found = sum(1 for p in root.iterdir() if p.is_dir())
    except OSError:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v for v in visible.split(",") if v.strip() and not v.strip().startswith("-")]
        found = min(found, len(ids))
    return found


def measure_devices(dataset_device: str, gpus: int) -> tuple[tuple[str, ...], Optional[str]]:
    """The devices this machine can measure a dataset's partitioning on, the dataset's own
    first, and why its own device is not among them (None when it is)."""
    have = ("cuda", "cpu") if gpus else ("cpu",)
    if dataset_device in have:
        return (dataset_device,) + tuple(d for d in have if d != dataset_device), None
    return have, (f"This dataset was measured on {dataset_device}, but this machine has no "
                  "CUDA device (the NVIDIA driver lists none), so here it can be measured on "
                  "the CPU only. A CPU run's peaks differ from a GPU's (other workspaces and "
                  "allocator): it is stored apart and not shown as this dataset's measured peak.")
