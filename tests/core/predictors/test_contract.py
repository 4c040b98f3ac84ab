"""Predictors (the registry's contract, then each predictor) on profiles generated from known
truths: every registered predictor is searched exactly, reproduces an additive truth, and
the once-per-stage predictors recover the terms Listing 1.1 cannot express."""
from __future__ import annotations

import numpy as np
import pytest

from mcap.core.errors import McapError
from mcap.core.partition import enumerate_all
from mcap.core.profiling.schedule import profiling_plan
from mcap.core.predict import predict
from mcap.core import predictors
from mcap.core.predictors.maxparam import fit_maxparam
from mcap.core.recommend import recommend
from mcap.core.search.tiebreak import key
from mcap.core.profiling.stats import extract, stage_windows
from mcap.core.types import Layer, ModelInfo, Profile, Run, Setup

# A model where some layers have no parameters (ReLU/pool-like), as in VGG11.
PARAMS = (40, 0, 0, 90, 0, 10, 70, 0, 0, 20, 5, 0)
ACT = (30, 12, 8, 20, 6, 9, 14, 3, 3, 7, 4, 2)  # bytes a stage's input boundary costs
L, G = len(PARAMS), 4


def truth_max(a: int, z: int) -> int:
    """Weights+grads+momentum (3x) plus temporaries the size of the largest parameter tensor
    (2x) plus the input boundary: the structure measured on VGG11
    (bench/log/2026-11-22-evaluation-paper-vs-maxparam.md)."""
    return 3 * sum(PARAMS[a:z + 1]) + 2 * max(PARAMS[a:z + 1]) + ACT[a] + 1


WORKSPACE = 500  # paid once by any stage holding a layer with parameters (a GPU workspace)


def truth_presence(a: int, z: int) -> int:
    return truth_max(a, z) + (WORKSPACE if any(PARAMS[a:z + 1]) else 0)


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


def make(prof, name):
    return predictors.fit(prof, name)


# --- the registry's contract: every predictor -----------------------------------------------

@pytest.mark.parametrize("name", predictors.names())
@pytest.mark.parametrize("method", ["exact", "bf"])
def test_every_predictor_is_searched_exactly(name, method):
    prof = profile_of(truth_max)
    costs = make(prof, name)
    rec = recommend(prof, G, method, name)
    bals = all_balances()
    peaks = costs.peaks_many(bals)
    best = min(range(len(bals)), key=lambda i: key(peaks[i], bals[i]))
    assert rec.balance == tuple(int(n) for n in bals[best]) and rec.predictor == name
    assert rec.predicted_peaks == costs.peaks(rec.balance)


@pytest.mark.parametrize("name", predictors.names())
def test_every_predictor_is_exact_on_an_additive_truth_and_gives_int_peaks(name):
    prof = profile_of(truth_add)
    costs = make(prof, name)
    assert errors(costs, truth_add).max() == 0.0
    peaks = costs.peaks_many(all_balances())
    assert peaks.dtype == np.int64 and (peaks > 0).all()


@pytest.mark.parametrize("name", predictors.names())
def test_every_predictor_reports_its_own_peaks_for_every_method(name):
    prof = profile_of(truth_max)
    costs = make(prof, name)
    for method in ("bo", "uniform", "params"):
        rec = recommend(prof, G, method, name, iterations=12)
        assert rec.predicted_peaks == costs.peaks(rec.balance)
    assert recommend(prof, G, "uniform", name).balance == (3, 3, 3, 3)


def test_the_default_is_registered_and_listed_first_to_last_in_registration_order():
    assert predictors.DEFAULT in predictors.names()
    assert predictors.names()[:2] == ("paper", "maxparam")


# --- each predictor --------------------------------------------------------------------------

def test_paper_predictor_is_listing_1_1_of_the_profile():
    prof = profile_of(truth_max)
    pred = make(prof, "paper")
    for b in ((3, 3, 3, 3), (1, 1, 1, 9), (9, 1, 1, 1)):
        assert pred.peaks(b) == predict(prof.stats, b).peaks
    assert pred.table is not None  # additive: searches may take the prefix-sum paths


def test_maxparam_recovers_a_max_term_the_paper_predictor_misses():
    prof = profile_of(truth_max)
    paper, mp = make(prof, "paper"), make(prof, "maxparam")
    assert mp.details["largest parameter tensor"] == 2.0 and mp.details["held_out_error"] == 0.0
    assert errors(mp, truth_max).max() == 0.0  # exact on all 165 partitionings
    assert errors(paper, truth_max).max() > 0.05  # the paper's additive form cannot be


def test_maxparam_keeps_the_paper_form_when_the_truth_is_additive():
    prof = profile_of(truth_add)
    mp = make(prof, "maxparam")
    assert mp.details["largest parameter tensor"] == 0.0 and errors(mp, truth_add).max() == 0.0


def test_without_held_out_windows_maxparam_is_the_paper_predictor():
    # A 2-stage plan reads a statistic from every window it measures: nothing is left to
    # choose a weight on, so the paper's form (weight 0) is kept.
    runs = tuple(measure(b, truth_max) for b in profiling_plan(L, 2).runs)
    fit = fit_maxparam(runs, PARAMS)
    assert fit.terms[0].weight == 0.0 and fit.error is None
    assert fit.stats == extract(runs, L)


def test_perstage_recovers_a_workspace_paid_once_per_stage():
    prof = profile_of(truth_presence)
    ps, mp = make(prof, "perstage"), make(prof, "maxparam")
    assert ps.details["once per stage with parameters"] > 0
    assert errors(ps, truth_presence).max() < errors(mp, truth_presence).max()
    assert errors(ps, truth_presence).max() < 0.01


def test_perstage_is_maxparam_when_nothing_is_paid_once():
    prof = profile_of(truth_max)
    ps, mp = make(prof, "perstage"), make(prof, "maxparam")
    assert "once per stage with parameters" not in ps.details
    bals = all_balances()
    assert (ps.peaks_many(bals) == mp.peaks_many(bals)).all()


def test_bad_requests_name_the_values():
    prof = profile_of(truth_max)
    with pytest.raises(McapError, match=r"unknown predictor 'nope'; expected one of paper, maxparam"):
        recommend(prof, G, "exact", "nope")
    bare = Profile(prof.model, prof.setup, prof.stats, ())
    for name in ("maxparam", "perstage"):  # nothing to fit on: Listing 1.1, and it says so
        costs = make(bare, name)
        assert costs.peaks((3, 3, 3, 3)) == predict(prof.stats, (3, 3, 3, 3)).peaks
        assert "no measured runs" in costs.details["note"]
    with pytest.raises(McapError, match=r"13 stages but the model has only 12 layers"):
        recommend(prof, 13, "exact", "maxparam")
    with pytest.raises(McapError, match="needs the profile's runs"):
        recommend(prof.stats, G, "exact", "maxparam")


# Two equal-weight layers of one kind whose workspace is 5x their weight while a third of the
# same kind and weight pays 2x: CPU oneDNN picks a convolution's backward by its shape (VGG11
# at 32x32: conv4_2 about 2x, conv5_1 and conv5_2 about 5x;
# bench/log/2026-11-23-perstage-per-layer-cpu-vs-gpu.md).
SHAPED = (40, 0, 90, 0, 90, 0, 90, 0, 10, 0, 20, 0)
SHAPED_C = (2, 0, 2, 0, 5, 0, 5, 0, 2, 0, 2, 0)


def truth_shaped(a: int, z: int) -> int:
    return 3 * sum(SHAPED[a:z + 1]) + max(c * p for c, p in zip(SHAPED_C[a:z + 1], SHAPED[a:z + 1])) \
        + ACT[a] + 1


def _shaped_profile():
    plan = profiling_plan(L, G).runs
    measured = tuple(Run(tuple(b), "ok", tuple(truth_shaped(a, z) for a, z in stage_windows(b)),
                         1.0) for b in plan)
    model = ModelInfo("toy", tuple(Layer(f"l{i}", p, "Conv2d" if p else "ReLU")
                                   for i, p in enumerate(SHAPED)))
    return Profile(model, Setup(stages=G), extract(measured, L), measured)


def _shaped_errors(pred):
    bals = all_balances()
    got = pred.peaks_many(bals).max(axis=1)
    want = np.array([max(truth_shaped(a, z) for a, z in stage_windows(b)) for b in bals])
    return np.abs(got - want) / want


def test_perstage_recovers_a_workspace_that_differs_between_equal_layers(monkeypatch):
    from mcap.core.predictors import perstage
    prof = _shaped_profile()
    refined = make(prof, "perstage")
    assert _shaped_errors(refined).max() < 0.005
    assert refined.details["largest parameter tensor, per layer"]["l4"] == 5.0
    monkeypatch.setattr(perstage, "MAX_REFINED_LAYERS", 0)  # one c per kind only
    assert _shaped_errors(make(prof, "perstage")).max() > 0.05


# --- the middle-stage term (perstage; bench/log/2026-11-25-middle-stages-amoebanet.md) ---

PASSED = (0, 6, 9, 4, 7, 0, 5, 3, 0, 0, 6, 0)  # bytes each layer forwards of its own input
# (0 for layers 8 and 9: the plan reads mem_added(9), mem_added(10) from middle windows
# starting there, so a middle term of theirs would be inside those statistics)
CHUNKS = 4


def truth_pass(a: int, z: int) -> int:
    """An additive truth plus what a middle stage of 2+ layers holds per micro-batch for the
    input its first layer forwards (alone on a middle stage it forwards the receive buffer),
    as AmoebaNet-D on CPU (bench/log/2026-11-25-middle-stages-amoebanet.md)."""
    middle = 0 < a < z < L - 1
    return truth_add(a, z) + (CHUNKS * PASSED[a] if middle else 0)


def test_midfirst_term_counts_only_middle_stages_of_two_or_more_layers():
    from mcap.core.costs import Term
    t = Term("m", "midfirst", (1, 10, 20, 30, 40), 1.0)
    first = np.array([0, 0, 1, 1, 1, 2, 3, 4, 1])
    last = np.array([0, 2, 1, 2, 3, 3, 4, 4, 4])
    # first stage, first stage, one layer, middle, middle, middle, last, last, last
    assert t.evaluate(first, last).tolist() == [0, 0, 0, 10, 10, 20, 0, 0, 0]
    assert Term("m", "midfirst", (1, 10, 20, 30, 40), 0.5).evaluate(first, last)[3] == 5


def test_middle_term_reads_what_each_held_out_middle_window_is_under_predicted_by():
    from mcap.core.costs import TermCosts
    from mcap.core.predict import cost_table
    from mcap.core.predictors.base import Windows, held_out, ok_runs
    from mcap.core.predictors.perstage import middle_term
    prof = profile_of(truth_pass)
    wins = Windows(prof.runs, L)
    listing = wins.score(())  # Listing 1.1 alone: the truth's additive part is exact
    term = middle_term(wins, listing)
    shown = {a for (a, z), _ in held_out(ok_runs(prof.runs, L), L) if 0 < a < z < L - 1}
    assert shown == {2, 3, 4, 5, 6, 7}  # one middle window per first layer; none for 1
    assert term.values == tuple(CHUNKS * PASSED[a] if a in shown else 0 for a in range(L))
    costs = TermCosts(cost_table(wins.score((term,)).stats), (term,), "t")
    for a in range(1, L - 1):
        for z in range(a + 1, L - 1):  # exact where shown, as low as before where not
            assert costs.stage(a, z) == truth_pass(a, z) - (0 if a in shown else CHUNKS * PASSED[a])


def test_perstage_adds_no_middle_term_when_middle_windows_err_both_ways():
    from mcap.core.predictors.perstage import MIDDLE

    def noisy(a, z):  # middle windows off by +-3 bytes: not memory Listing 1.1 leaves out
        return truth_max(a, z) + ((3 if a % 2 else -3) if 0 < a < z < L - 1 else 0)

    assert MIDDLE not in make(profile_of(noisy), "perstage").details
    assert MIDDLE not in make(profile_of(truth_max), "perstage").details
