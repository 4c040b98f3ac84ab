"""The one recommendation entry (mCAP 3.4): every CLI command, the evaluation, scaling and
every page call :func:`recommend`. Pure: no torch, no files.

    recommend(profile, 4)                                   # exact under the default predictor
    recommend(profile, 4, method="bo", predictor="paper", seed=3)
    recommend(stats, 4, method="bf")                        # LayerStats: Listing 1.1 as is
    recommend(costs, 4, method="exact")                     # a fitted StageCosts

The predictor (``mcap.core.predictors``) turns the profile into stage costs; the method
(``mcap.core.search``) searches them; the answer is a :class:`Recommendation` whose
predicted peaks come from the same costs, so every method's pick is comparable.
"""
from __future__ import annotations

import math
import time
from functools import lru_cache
from typing import Optional, Union

from mcap.core.costs import AdditiveCosts, StageCosts
from mcap.core.errors import McapError
from mcap.core.partition import validate
from mcap.core.predict import cost_table
from mcap.core.search.base import Progress, SearchContext, choose
from mcap.core.setup import micro_batch
from mcap.core.types import LayerStats, Profile, Recommendation

Source = Union[Profile, StageCosts, LayerStats]


@lru_cache(maxsize=16)
def _fit(profile: Profile, name: str) -> StageCosts:
    from mcap.core import deepen, predictors
    from mcap.core.capture import batchscale
    if deepen.deepened(profile):
        # issue 41: a deep model predicted from a shallow profile; the predictor fits the
        # shallow one and each deep stage is read from it (mcap.core.deepen.DeepCosts)
        return deepen.costs(profile, name, _fit)
    if batchscale.extrapolated(profile):
        # CAPTURE (III-B2): a profile extrapolated to its batch size predicts per stage on
        # the line through its two profiled sizes; each variant is fitted as a profile.
        return batchscale.costs_at(profile, None, name, _fit)
    return predictors.fit(profile, name)


def costs_at(profile: Profile, batch_size: Optional[int], predictor: Optional[str] = None
             ) -> StageCosts:
    """The profile's stage costs at ``batch_size`` (None: its own), through batch-size
    scaling where that differs from what was profiled (``mcap.core.capture.batchscale``)."""
    from mcap.core import predictors
    from mcap.core.capture import batchscale
    name = predictor or predictors.DEFAULT
    predictors.get(name)
    return batchscale.costs_at(profile, batch_size, name, _fit)


def costs_of(source: Source, predictor: Optional[str] = None) -> StageCosts:
    """The stage costs of a profile under ``predictor`` (default: the registry's), of bare
    statistics (Listing 1.1, predictor ``paper``), or ``source`` itself."""
    from mcap.core import predictors
    from mcap.core.predictors.paper import Paper  # Listing 1.1 over the statistics as they are
    if isinstance(source, Profile):
        name = predictor or predictors.DEFAULT
        predictors.get(name)  # names the choices for an unknown one
        return _fit(source, name)
    if predictor not in (None, Paper.name) and isinstance(source, LayerStats):
        raise McapError(f"predictor {predictor!r} needs the profile's runs; bare statistics "
                        "only give the paper's Listing 1.1")
    if isinstance(source, LayerStats):
        return AdditiveCosts(cost_table(source), Paper.name)
    if isinstance(source, StageCosts):
        if predictor not in (None, source.predictor):
            raise McapError(f"these stage costs come from predictor {source.predictor!r}, "
                            f"not {predictor!r}")
        return source
    raise McapError(f"cannot recommend from a {type(source).__name__}; expected a profile, "
                    "layer statistics or stage costs")


def context_of(profile: Profile, timer=None) -> SearchContext:
    return SearchContext(layer_params=tuple(l.param_bytes for l in profile.model.layers),
                         layer_kinds=tuple(l.kind for l in profile.model.layers),
                         spec=profile.model.spec, micro_batch=micro_batch(profile.setup),
                         timer=timer)


def check_stages(stages, num_layers: int) -> None:
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise McapError(f"stages must be an integer >= 1, got {stages!r}")
    if stages > num_layers:
        raise McapError(f"{stages} stages but the model has only {num_layers} layers; every "
                        "stage needs at least one")


def recommend(source: Source, stages: int, method: str = "exact",
              predictor: Optional[str] = None, *, context: Optional[SearchContext] = None,
              layer_params=None, progress: Progress = None, tie_tolerance: float = 0.0,
              **options) -> Recommendation:
    """The partitioning of the source's layers over ``stages`` devices that ``method`` picks,
    with its predicted per-stage peaks under ``predictor`` (module docstring). ``method`` is
    a name or ``name:ARGUMENT`` (``type:Block``, ``mcap.core.search.base.choose``); the
    Recommendation keeps it as given."""
    chosen, given = choose(method)  # an unknown method fails before any fitting
    options = {**options, **given}
    costs = costs_of(source, predictor)
    check_stages(stages, costs.num_layers)
    if tie_tolerance is None or not isinstance(tie_tolerance, (int, float)) \
            or not math.isfinite(tie_tolerance) or tie_tolerance < 0:
        raise McapError(f"tie_tolerance must be a finite fraction >= 0, got {tie_tolerance!r}")
    if context is None:
        context = context_of(source) if isinstance(source, Profile) else SearchContext()
    if layer_params is not None:
        from dataclasses import replace
        context = replace(context, layer_params=tuple(layer_params))
    if chosen.tolerance:
        options["tie_tolerance"] = tie_tolerance
    started = time.perf_counter()
    found = chosen.search(costs, stages, context, progress=progress, **options)
    seconds = time.perf_counter() - started
    part = validate(found.balance, costs.num_layers)
    return Recommendation(method=method, balance=part.balance,
                          predicted_peaks=costs.peaks(part.balance), seconds=seconds,
                          evaluated=int(found.evaluated), curve=tuple(found.curve),
                          predictor=costs.predictor)
