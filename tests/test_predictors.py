"""Predictors: the paper's Listing 1.1 and maxparam, on profiles generated from known truths."""
from __future__ import annotations

import numpy as np
import pytest

from mcap.core.errors import McapError, SearchTooLarge
from mcap.core.partition import enumerate_all
from mcap.core.plan import profiling_plan
from mcap.core.predict import predict
from mcap.core.predictors import MAX_ENUMERATE, PREDICTORS, fit_maxparam, make_predictor, search
from mcap.core.search.tiebreak import key
from mcap.core.stats import extract, stage_windows
from mcap.core.types import Layer, ModelInfo, Profile, Run, Setup

# A model where some layers have no parameters (ReLU/pool-like), as in VGG11.
PARAMS = (40, 0, 0, 90, 0, 10, 70, 0, 0, 20, 5, 0)
ACT = (30, 12, 8, 20, 6, 9, 14, 3, 3, 7, 4, 2)  # bytes a stage's input boundary costs
L, G = len(PARAMS), 4


def truth_max(a: int, z: int) -> int:
    """Weights+grads+momentum (3x) plus temporaries the size of the largest parameter tensor
    (2x) plus the input boundary: the structure measured on VGG11 (BENCHMARKS.md)."""
    return 3 * sum(PARAMS[a:z + 1]) + 2 * max(PARAMS[a:z + 1]) + ACT[a] + 1


def truth_add(a: int, z: int) -> int:
    """An additive truth: Listing 1.1 is exact for it."""
    return 3 * sum(PARAMS[a:z + 1]) + ACT[a] + 1


def measure(balance, truth) -> Run:
    return Run(tuple(balance), "ok", tuple(truth(a, z) for a, z in stage_windows(balance)), 1.0)


def profile_of(truth, runs=None) -> Profile:
    plan = profiling_plan(L, G).runs if runs is None else runs
    measured = tuple(measure(b, truth) for b in plan)
    model = ModelInfo("toy", tuple(Layer(f"l{i}", p) for i, p in enumerate(PARAMS)))
    return Profile(model, Setup(stages=G), extract(measured, L), measured)


def all_balances():
    return np.concatenate(list(enumerate_all(L, G)))


def errors(pred, truth):
    bals = all_balances()
    got = pred.peaks_many(bals).max(axis=1)
    want = np.array([max(truth(a, z) for a, z in stage_windows(b)) for b in bals])
    return np.abs(got - want) / want


def test_paper_predictor_is_listing_1_1_of_the_profile():
    prof = profile_of(truth_max)
    pred = make_predictor(prof, "paper")
    for b in ((3, 3, 3, 3), (1, 1, 1, 9), (9, 1, 1, 1)):
        assert pred.peaks(b) == predict(prof.stats, b).peaks
    assert pred.additive and pred.weight == 0


def test_maxparam_recovers_a_max_term_the_paper_predictor_misses():
    prof = profile_of(truth_max)
    paper, mp = make_predictor(prof, "paper"), make_predictor(prof, "maxparam")
    assert mp.weight == 2.0 and mp.held_out_error == 0.0
    assert errors(mp, truth_max).max() == 0.0  # exact on all 165 partitionings
    assert errors(paper, truth_max).max() > 0.05  # the paper's additive form cannot be


def test_maxparam_keeps_the_paper_form_when_the_truth_is_additive():
    prof = profile_of(truth_add)
    mp = make_predictor(prof, "maxparam")
    assert mp.weight == 0.0 and errors(mp, truth_add).max() == 0.0
    assert errors(make_predictor(prof, "paper"), truth_add).max() == 0.0


def test_without_held_out_windows_maxparam_is_the_paper_predictor():
    # A 2-stage plan reads a statistic from every window it measures: nothing is left to
    # choose a weight on, so the paper's form (weight 0) is kept.
    runs = tuple(measure(b, truth_max) for b in profiling_plan(L, 2).runs)
    mp = fit_maxparam(runs, PARAMS)
    assert (mp.weight, mp.held_out_error) == (0.0, None)
    assert mp.stats == extract(runs, L)


@pytest.mark.parametrize("method", ["exact", "bf"])
def test_search_under_maxparam_finds_the_lowest_predicted_partitioning(method):
    mp = make_predictor(profile_of(truth_max), "maxparam")
    rec = search(mp, G, method)
    bals = all_balances()
    peaks = mp.peaks_many(bals)
    best = min(range(len(bals)), key=lambda i: key(peaks[i], bals[i]))
    assert rec.balance == tuple(int(n) for n in bals[best])
    assert rec.predicted_peaks == mp.peaks(rec.balance) and rec.evaluated == len(bals)


def test_bo_and_baselines_under_maxparam_report_its_own_peaks():
    prof = profile_of(truth_max)
    mp = make_predictor(prof, "maxparam")
    bo = search(mp, G, "bo", iterations=12)
    assert sum(bo.balance) == L and bo.predicted_peaks == mp.peaks(bo.balance)
    uni = search(mp, G, "uniform")
    assert uni.balance == (3, 3, 3, 3) and uni.predicted_peaks == mp.peaks((3, 3, 3, 3))
    par = search(mp, G, "params", layer_params=list(PARAMS))
    assert par.predicted_peaks == mp.peaks(par.balance)


def test_bad_requests_name_the_values(monkeypatch):
    prof = profile_of(truth_max)
    with pytest.raises(McapError, match=r"unknown predictor 'nope'; expected one of paper, maxparam"):
        make_predictor(prof, "nope")
    assert PREDICTORS == ("paper", "maxparam")
    bare = Profile(prof.model, prof.setup, prof.stats, ())
    with pytest.raises(McapError, match="needs the profile's measured runs; this profile has 0 runs"):
        make_predictor(bare, "maxparam")
    mp = make_predictor(prof, "maxparam")
    with pytest.raises(McapError, match=r"stages must be an integer in 1..12, got 13"):
        search(mp, 13, "exact")
    monkeypatch.setattr("mcap.core.predictors.MAX_ENUMERATE", 100)
    with pytest.raises(SearchTooLarge, match="165 partitionings of 12 layers on 4 stages exceed 100"):
        search(mp, G, "exact")
    assert MAX_ENUMERATE > 3654  # VGG11 on 4 stages is always searchable
