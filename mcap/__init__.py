"""mcap: memory-centric partitioning for pipeline-parallel training (mCAP, CAPTURE, MPress).

The pure core (partitionings, statistics, prediction, search) imports neither torch
nor files; torch lives in the runner/model modules, files and SQLite in the store.
"""
from mcap.core.errors import McapError
from mcap.core.types import (
    Layer, LayerStats, MemoryBreakdown, ModelInfo, Partitioning, Prediction, Profile,
    Recommendation, Run, Setup, Sweep,
)

__version__ = "0.1.0"
__all__ = [
    "McapError", "Layer", "LayerStats", "MemoryBreakdown", "ModelInfo", "Partitioning",
    "Prediction", "Profile", "Recommendation", "Run", "Setup", "Sweep", "__version__",
]
