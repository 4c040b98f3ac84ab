"""Predicting a deeper model from a shallow profile (issue 41, item 3): the profile
transformation in front of the predictors, checked on a model whose every stage's peak is
known in closed form."""
import numpy as np
import pytest

from mcap.core.deepen import DeepCosts, DeepProfile, deepen, shallow_blocks, unmeasured
from mcap.core.errors import McapError
from mcap.core.predictors.base import names as predictor_names
from mcap.core.profiling.schedule import profiling_plan
from mcap.core.profiling.stats import stage_windows
from mcap.core.recommend import costs_of, recommend
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Run, Setup

EMB, BLOCK, NORM, HEAD = 98_000, 9_000, 3, 98_000   # persistent bytes of each layer


def model(blocks: int) -> ModelInfo:
    return ModelInfo(f"toy:blocks={blocks}",
                     (Layer("embeddings", EMB // 3, "TokenEmbeddings"),)
                     + tuple(Layer(f"block{i}", BLOCK // 3, "Block") for i in range(blocks))
                     + (Layer("norm", NORM // 3 or 1, "Norm"), Layer("lm_head", HEAD // 3, "LMHead")))


def truth(first: int, last: int, blocks: int) -> int:
    """A stage's peak as the CPU runs showed (BENCHMARKS-style regimes, issue 41): a middle
    stage grows by 19 kB a block from the start; a first stage by 14 kB until its recompute
    regime (the middle's plus the embedding's persistent bytes) takes over; a last stage by
    11 kB from the head's big transient."""
    L = blocks + 3
    k = max(0, min(last, blocks) - max(first, 1) + 1)
    persistent = (EMB if first == 0 else 0) + (NORM + HEAD if last >= L - 2 else 0)
    middle = 5_000 + 19_000 * k
    if first == 0 and last >= L - 2:  # the whole model on one stage (never measured)
        return persistent + 300_000 + 14_000 * k
    if first == 0:
        return max(EMB + 36_000 + 14_000 * k, middle + EMB) if k else EMB + 36_000
    if last == L - 1:
        return persistent + 297_000 + 11_000 * k
    if last == L - 2:  # ending with the norm: a middle stage and a little
        return middle + 800
    return middle


def measured(blocks: int, balances, stages=4) -> tuple[Run, ...]:
    return tuple(Run(tuple(b), "ok", tuple(truth(a, z, blocks) for a, z in stage_windows(b)), 1.0)
                 for b in balances)


def shallow_profile(blocks=5, scheme="capture", stages=4) -> Profile:
    info = model(blocks)
    plan = profiling_plan(info.num_layers, stages, scheme)
    runs = measured(blocks, plan.runs)
    from mcap.core.profiling.stats import extract
    return Profile(info, Setup(stages=stages), extract(runs, info.num_layers), runs)


def deep_windows(blocks):
    L = blocks + 3
    return [(a, z) for a in range(L) for z in range(a, L)]


def test_the_deep_profile_is_the_deep_models():
    shallow = shallow_profile(5)
    deep = deepen(shallow, 20, "toy:blocks=20")
    assert isinstance(deep, DeepProfile) and deep.shallow is shallow and deep.runs == ()
    assert deep.model == model(20)
    assert deep.extra["deepened"] == {"from": "toy:blocks=5", "first_block": 1, "blocks": 5, "to": 20}
    # mCAP 3.1's statistics: block j takes shallow block min(j, N - 1)'s
    s = shallow.stats
    assert deep.stats.mem_isolated[1:21] == s.mem_isolated[1:5] + (s.mem_isolated[5],) * 16
    assert deep.stats.mem_added[-2:] == s.mem_added[-2:]


@pytest.mark.parametrize("predictor", predictor_names())
def test_a_measured_shallow_stage_is_the_deep_stage_of_the_same_kind(predictor):
    shallow = shallow_profile(5)
    costs = costs_of(deepen(shallow, 20, "toy:blocks=20"), predictor)
    assert isinstance(costs, DeepCosts) and costs.num_layers == 23
    measured_windows = {w for r in shallow.runs for w in stage_windows(r.balance)}
    for a, z in measured_windows:  # the same layers at the deep model's positions
        da = a if a < 1 else (a + 15 if a >= 6 else a)
        dz = z if z < 1 else (z + 15 if z >= 6 else z)
        assert costs.stage(da, dz) == truth(da, dz, 20)


def test_every_deep_stage_follows_its_kind_and_the_middle_floor():
    costs = costs_of(deepen(shallow_profile(5), 20, "toy:blocks=20"))
    errors = {}
    for a, z in deep_windows(20):
        if a == 0 and z >= 21:  # one stage holding the whole model: not a pipeline stage
            continue
        kind = "first" if a == 0 else "last" if z == 22 else "middle"
        e = abs(costs.stage(a, z) - truth(a, z, 20)) / truth(a, z, 20)
        errors[kind] = max(errors.get(kind, 0), e)
    assert errors["middle"] == 0  # linear from its first block: read, not guessed
    assert errors["first"] < 0.01  # its recompute regime comes from the middle line
    assert errors["last"] == 0  # linear here, and grown along its own increment


def test_more_blocks_than_profiled_never_shrink_a_stage():
    costs = costs_of(deepen(shallow_profile(5), 40, "toy:blocks=40"))
    for start, end in ((0, None), (3, None), (None, 42)):
        peaks = [costs.stage(start, z) for z in range(start + 1, 40)] if end is None else \
            [costs.stage(a, end) for a in range(40, 1, -1)]
        assert all(y >= x for x, y in zip(peaks, peaks[1:]))


def test_recommend_and_every_method_see_the_deep_model():
    deep = deepen(shallow_profile(5), 20, "toy:blocks=20")
    rec = recommend(deep, 4)
    assert sum(rec.balance) == 23
    truths = [truth(a, z, 20) for a, z in stage_windows(rec.balance)]
    assert rec.predicted_peaks == pytest.approx(truths, rel=0.01)
    assert recommend(deep, 4, "titan").balance == (6, 6, 5, 6)  # 20 blocks + 1 + 1 over 4


def test_a_profile_without_measured_last_stages_says_so():
    # mCAP's plan puts the long window first: no last stage holding blocks is measured
    deep = deepen(shallow_profile(4, scheme="mcap"), 16, "toy:blocks=16")
    assert unmeasured(deep) == ["last stages"]
    assert unmeasured(deepen(shallow_profile(5), 20, "toy:blocks=20")) == []


def test_what_cannot_be_deepened_is_refused_naming_it():
    with pytest.raises(McapError, match="--blocks must be an integer from 2"):
        deepen(shallow_profile(5), 1, "toy")
    kindless = Profile(ModelInfo("x", tuple(Layer(f"l{i}", 10) for i in range(6))), Setup(stages=2),
                       LayerStats((1,) * 6, (None,) + (1,) * 5))
    with pytest.raises(McapError, match="records no layer kinds"):
        deepen(kindless, 8, "x")
    mixed = Profile(ModelInfo("y", tuple(Layer(f"l{i}", 10 + i, "Conv") for i in range(6))),
                    Setup(stages=2), LayerStats((1,) * 6, (None,) + (1,) * 5))
    with pytest.raises(McapError, match="no repeated block"):
        deepen(mixed, 8, "y")
    assert shallow_blocks(shallow_profile(3, scheme="mcap")).count == 3


def test_a_deep_profile_deepens_from_its_shallow_one():
    shallow = shallow_profile(5)
    twice = deepen(deepen(shallow, 10, "toy:blocks=10"), 20, "toy:blocks=20")
    assert twice.shallow is shallow
    a = costs_of(twice).matrix()
    b = costs_of(deepen(shallow, 20, "toy:blocks=20")).matrix()
    assert np.array_equal(a, b)
