"""What devices this machine has, without importing torch in the dashboard server: the
NVIDIA driver lists its GPUs under /proc/driver/nvidia/gpus; CUDA_VISIBLE_DEVICES narrows
them as it does for the stage processes. The profiling job itself checks again with torch
and refuses a device it cannot use."""
from __future__ import annotations

import os
from pathlib import Path

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
