"""The middle-stage term on real CPU runs of a tiny AmoebaNet-D
(bench/log/2026-11-25-middle-stages-amoebanet.md): a cell alone on a middle stage forwards its
receive buffer as its skip
state; behind another layer it forwards a new tensor per micro-batch."""
from __future__ import annotations

import pytest

from mcap.core import predictors
from mcap.core.profiling.schedule import profiling_plan
from mcap.core.predictors.perstage import MIDDLE
from mcap.core.profiling.stats import extract, stage_windows
from mcap.core.types import Profile, Setup
from mcap.runner import open_runner

SPEC = "amoebanet-d:layers=3,filters=16"


@pytest.mark.integration
def test_a_middle_window_the_profile_never_measured_is_predicted_from_its_first_layer():
    setup = Setup(stages=4, batch_size=8, chunks=4, checkpoint="never")
    with open_runner(SPEC, setup, timeout=300) as r:
        L = r.model_info.num_layers
        runs = tuple(r.measure(b) for b in profiling_plan(L, 4).runs)
        prof = Profile(r.model_info, setup, extract(runs, L), runs)
        with_term = predictors.fit(prof, "perstage")
        m = with_term.details.get(MIDDLE, {})
        assert m, with_term.details
        # a middle window of 2 layers starting at a layer the profile has a term for, that
        # no profiling run measured
        measured = {w for run in runs for w in stage_windows(run.balance)}
        names = [l.name for l in r.model_info.layers]
        a = next(a for a in range(2, L - 2) if names[a] in m and (a, a + 1) not in measured)
        balance = (a, 2, L - a - 3, 1)
        run = r.measure(balance)
    assert run.status == "ok", run.error
    got, want = with_term.peaks(balance)[1], run.peaks[1]
    before = predictors.fit(prof, "maxparam").peaks(balance)[1]
    assert before < want  # Listing 1.1 (+ max term) is low on it
    assert abs(got - want) / want < abs(before - want) / want
