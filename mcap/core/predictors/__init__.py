"""Selectable peak-memory predictors (the registry is in ``base``; ARCHITECTURE.md).

Each module registers one predictor; importing this package registers them all, in the
order the selectors list them. :data:`DEFAULT` is the one every command and page uses
unless told otherwise (bench/log/2026-11-26-gpu-predictors.md says why).
"""
from mcap.core.predictors.base import Predictor, get, names, register
from mcap.core.predictors import paper, maxparam, perstage, workspace  # noqa: F401  (registration)

DEFAULT = "workspace"


def fit(profile, name: str = DEFAULT):
    """``name``'s StageCosts for ``profile``."""
    return get(name).fit(profile)


__all__ = ["DEFAULT", "Predictor", "fit", "get", "names", "register"]
