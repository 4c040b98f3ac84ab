"""Hybrid-stage prediction from a profile's variants (CAPTURE III-B) and the recommender on a
mesh over it (III-C): pp from the profile's predictor, dp/tp from their own statistics, the
batch line and the logarithmic degree fit, and refusals that name the missing statistics."""
from __future__ import annotations

import pytest

from mcap.core import predictors
from mcap.core.errors import McapError
from mcap.core.capture.plan import Mesh, batch_line, log_degree, parse_mesh, parse_plan
from mcap.core.capture.predict import (
    HybridCosts, inverse_fit, log_fit, per_stage_runs, recommend_mesh,
)
from mcap.core.recommend import costs_of
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Run, Setup, VariantStats

L = 12


def stats(scale: float, shift: int = 0) -> LayerStats:
    iso = tuple(int(scale * (1000 + 97 * ((i * 5) % 7))) + shift for i in range(L))
    added = (None,) + tuple(int(scale * (300 - 40 * (i % 4))) for i in range(1, L))
    return LayerStats(iso, added)


def listing(s: LayerStats, a: int, z: int) -> int:
    return s.mem_isolated[a] + sum(s.mem_added[a + 1:z + 1])


def make_profile(variants=(), batch=16) -> Profile:
    return Profile(model=ModelInfo("toy", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(L))),
                   setup=Setup(stages=4, batch_size=batch, engine="hybrid"), stats=stats(1.0),
                   variants=tuple(variants))


DP2, DP4 = VariantStats(16, stats(0.7), "dp", 2), VariantStats(16, stats(0.55), "dp", 4)
TP2, TP4 = VariantStats(16, stats(0.6), "tp", 2), VariantStats(16, stats(0.4), "tp", 4)


def test_each_stage_kind_is_predicted_from_its_own_statistics():
    hc = HybridCosts(make_profile([DP2, DP4, TP2, TP4]))
    assert hc.stage(2, 5, "pp", 1) == costs_of(hc.profile).stage(2, 5) == listing(stats(1.0), 2, 5)
    assert hc.stage(2, 5, "dp", 2) == listing(DP2.stats, 2, 5)
    assert hc.stage(0, 11, "tp", 4) == listing(TP4.stats, 0, 11)
    # degree 8 from 2 and 4: M(k) = R + S/k by default, III-B3's logarithmic fit on request
    m2, m4 = listing(TP2.stats, 3, 7), listing(TP4.stats, 3, 7)
    assert hc.stage(3, 7, "tp", 8) == round(m4 - (m2 - m4) / 2)
    log = HybridCosts(hc.profile, degree_fit="log")
    assert log.stage(3, 7, "tp", 8) == round(log_degree(m2, m4, 8))
    assert inverse_fit(2, 100, 4, 70, 8) == 55 and inverse_fit(1, 100, 2, 60, 4) == 40
    assert log_fit(2, 100, 4, 70, 8) == log_degree(100, 70, 8) == 40
    assert log_fit(4, 70, 8, 40, 16) == 10


def test_plan_peaks_are_per_device_in_stage_order():
    hc = HybridCosts(make_profile([DP2, DP4, TP2, TP4]))
    peaks = hc.peaks(parse_plan("3,3,6:tp2"))
    assert peaks == (listing(stats(1.0), 0, 2), listing(stats(1.0), 3, 5),
                     listing(TP2.stats, 6, 11), listing(TP2.stats, 6, 11))
    with pytest.raises(McapError, match="places 11 layers but the model has 12"):
        hc.peaks(parse_plan("3,2,6:tp2"))


def test_two_batch_sizes_give_the_line_at_the_target():
    low, high = VariantStats(4, stats(0.3), "dp", 2), VariantStats(8, stats(0.45), "dp", 2)
    hc = HybridCosts(make_profile([low, high]))
    want = round(batch_line(listing(low.stats, 1, 4), 4, listing(high.stats, 1, 4), 8, 16))
    assert hc.stage(1, 4, "dp", 2) == want


def test_missing_statistics_name_the_profile_command():
    hc = HybridCosts(make_profile([DP2]))
    with pytest.raises(McapError, match=r"tp2 stage .* no tp statistics.*--parallel dp,tp"):
        hc.stage(0, 3, "tp", 2)
    with pytest.raises(McapError, match=r"dp8 stage .* dp degrees 2"):
        hc.stage(0, 3, "dp", 8)
    one = HybridCosts(make_profile([VariantStats(4, stats(0.3), "tp", 2)]))
    with pytest.raises(McapError, match="tp2 stage at batch size 16 .* at batch size 4 only. "
                                        "Predict at --batch-size 4"):
        one.stage(0, 3, "tp", 2)
    # pp from engine pipelining beside dp/tp from engine hybrid: refused (it reads higher)
    mixed = make_profile([DP2, DP4])
    mixed = Profile(model=mixed.model, setup=Setup(stages=4, batch_size=16), stats=mixed.stats,
                    variants=mixed.variants)
    with pytest.raises(McapError, match=r"dp2 stage .* engine 'pipelining'.*--parallel dp,tp"):
        HybridCosts(mixed).stage(0, 3, "dp", 2)
    assert recommend_mesh(mixed, parse_mesh("1x4")).kinds == ()  # pipeline-only plans remain


def test_per_device_runs_become_per_stage_peaks():
    v = VariantStats(16, stats(0.7), "dp", 2,
                     (Run((6, 6), "ok", (10, 12, 30, 29), 1.0), Run((6, 6), "ok", (5, 7), 1.0)))
    assert [r.peaks for r in per_stage_runs(v)] == [(12, 30), (5, 7)]
    bad = VariantStats(16, stats(0.7), "dp", 2, (Run((6, 6), "ok", (1, 2, 3), 1.0),))
    with pytest.raises(McapError, match="has 3 peaks; expected one per stage \\(2\\) or per device \\(4\\)"):
        per_stage_runs(bad)


@pytest.mark.parametrize("mesh", ["1x4", "2x4", "2x2"])
def test_mesh_recommendation_dp_equals_enumeration_and_its_own_peaks(mesh):
    p = make_profile([DP2, DP4, TP2, TP4])
    m = parse_mesh(mesh)
    dp = recommend_mesh(p, m, "exact")
    en = recommend_mesh(p, m, "enumerate")
    full = recommend_mesh(p, m, "enumerate", prune=False)
    assert dp.plan == en.plan == full.plan and dp.peaks == en.peaks
    assert en.evaluated <= full.evaluated
    assert dp.peaks == HybridCosts(p).peaks(dp.plan) and len(dp.peaks) == m.devices
    assert dp.kinds == ("dp", "tp") and not dp.missing


def test_a_four_device_profile_searches_its_two_way_stages_on_1x4():
    """``profile --stages 4 --parallel dp,tp`` gives degree 2 only: the mesh search places
    dp2/tp2 and leaves out dp4/tp4, saying why, instead of dropping dp and tp."""
    import itertools
    from mcap.core.capture.plan import HybridPlan, StageConfig
    p = make_profile([DP2, TP2])
    m = parse_mesh("1x4")
    dp, en = recommend_mesh(p, m, "exact"), recommend_mesh(p, m, "enumerate", prune=False)
    assert dp.plan == en.plan and dp.peaks == en.peaks and dp.kinds == ("dp", "tp")
    assert len(dp.missing) == 2 and all("stage needs" in w for w in dp.missing)
    assert "dp4" in dp.missing[0] and "tp4" in dp.missing[1]
    hc = HybridCosts(p)
    plans = [HybridPlan(tuple(StageConfig(n, k, d) for n, (k, d) in zip(sizes, cfg)))
             for stages in range(1, 5)
             for cfg in itertools.product([("pp", 1), ("dp", 2), ("tp", 2)], repeat=stages)
             if sum(d for _, d in cfg) == 4
             for cuts in itertools.combinations(range(1, L), stages - 1)
             for sizes in [[b - a for a, b in zip((0,) + cuts, cuts + (L,))]]]
    assert max(dp.peaks) == min(max(hc.peaks(q)) for q in plans)
    assert not dp.plan.pipeline_only  # the 2-way stages are used, not only searched
    assert max(dp.peaks) < max(recommend_mesh(p, m, kinds=()).peaks)


def test_without_variants_the_mesh_gets_pipeline_only_plans():
    p = make_profile()
    rec = recommend_mesh(p, Mesh(2, 2))
    assert rec.plan.pipeline_only and len(rec.plan.stages) == 4 and rec.kinds == ()
    assert len(rec.missing) == 2 and "--parallel dp,tp" in rec.missing[0]
    from mcap.core.recommend import recommend
    assert rec.plan.balance == recommend(p, 4, "exact").balance
    with pytest.raises(McapError, match="the model has 12 layers; mesh 4x4 needs at least 16"):
        recommend_mesh(p, Mesh(4, 4))


def test_a_variant_with_per_device_runs_is_fitted_like_a_profile():
    """The runs path: a dp2 variant whose runs give a peak per device is fitted by the
    default predictor exactly as a pipeline profile with those (per-stage) runs."""
    import dataclasses
    from mcap.io import datasets
    base = datasets.load(datasets.parse_ref("bundled:gpt-l8-h256-cpu4.profile.json"))
    runs = tuple(dataclasses.replace(r, peaks=tuple(int(0.8 * p) for p in r.peaks))
                 for r in base.runs if r.status == "ok")
    per_device = tuple(dataclasses.replace(r, peaks=tuple(p - k for p in r.peaks for k in (0, 7)))
                       for r in runs)
    scaled = LayerStats(tuple(int(0.8 * x) for x in base.stats.mem_isolated),
                                (None,) + tuple(int(0.8 * x) for x in base.stats.mem_added[1:]))
    v = VariantStats(base.setup.batch_size, scaled, "dp", 2, per_device)
    hc = HybridCosts(dataclasses.replace(base, variants=(v,), setup=dataclasses.replace(
        base.setup, engine="hybrid")))
    want = costs_of(dataclasses.replace(base, stats=scaled, runs=runs, variants=()))
    L = base.model.num_layers
    got = [hc.stage(a, z, "dp", 2) for a in range(L) for z in range(a, L)]
    assert got == [want.stage(a, z) for a in range(L) for z in range(a, L)]
    assert hc.costs("dp", 2).predictor == predictors.DEFAULT
