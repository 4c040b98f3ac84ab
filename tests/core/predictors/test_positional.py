"""Middle and last stages read where they peak (``mcap.core.predictors.positional``): a first
stage that peaks in its embedding's backward and a last stage that peaks in its head's loss
see only part of a block's memory (GPT-2, bench/log/2026-11-26-gpt2-blocks.md). On a
synthetic truth with those three phases the default predictor recovers every partitioning;
Listing 1.1 alone does not."""
from __future__ import annotations

import numpy as np

from mcap.core import predictors
from mcap.core.partition import enumerate_all
from mcap.core.profiling.schedule import profiling_plan
from mcap.core.predictors.positional import LAST, MIDDLE
from mcap.core.profiling.stats import extract, stage_windows
from mcap.core.types import Layer, ModelInfo, Profile, Run, Setup
from tests.conftest import DATA

# embedding, 9 equal blocks, a norm, a head (GPT-2's sequence)
KINDS = ("Emb",) + ("Block",) * 9 + ("Norm", "Head")
PARAMS = (2000,) + (10,) * 9 + (2, 2000)
L, G = len(KINDS), 4


def truth(a: int, z: int) -> int:
    """The peak is the largest of the phases the stage holds: the embedding's backward
    (its dense gradient; blocks hold only their weights, 5 each), the blocks' own peak (each
    block 31 with its activations), the head's loss (its logits; blocks in front hold 17)."""
    held = range(a, z + 1)
    blocks = sum(1 for l in held if KINDS[l] == "Block")
    static = sum(3 * PARAMS[l] for l in held)
    norm = 1 if (L - 2) in held else 0
    phases = [static + 31 * blocks + 40 + norm] if blocks else [static + norm + 1]
    if 0 in held:
        phases.append(static + 5000 + 5 * blocks + norm)
    if (L - 1) in held:
        phases.append(static + 9000 + 17 * blocks + norm)
    return max(phases)


def profile() -> Profile:
    runs = tuple(Run(tuple(b), "ok", tuple(truth(a, z) for a, z in stage_windows(b)), 1.0)
                 for b in profiling_plan(L, G).runs)
    model = ModelInfo("toy", tuple(Layer(f"l{i}", p, k) for i, (p, k) in enumerate(zip(PARAMS, KINDS))))
    return Profile(model, Setup(stages=G), extract(runs, L), runs)


def errors(costs):
    bals = np.concatenate(list(enumerate_all(L, G)))
    got = costs.peaks_many(bals)
    want = np.array([[truth(a, z) for a, z in stage_windows(b)] for b in bals])
    return np.abs(got - want) / want


def test_middle_and_last_stages_are_read_where_they_peak():
    p = profile()
    paper = errors(predictors.get("paper").fit(p))
    assert paper.max() > 0.05  # Listing 1.1 reads the blocks on the first stage: 5, not 31
    for name in ("perstage", "workspace"):
        costs = predictors.get(name).fit(p)
        assert costs.details[MIDDLE] == {"Block/10": 31 + 3 * 10}
        assert costs.details[LAST]["Block/10"] == 17 + 3 * 10
        assert errors(costs).max() == 0.0, name


def test_not_kept_without_kinds_or_when_layers_differ():
    p = profile()
    kindless = Profile(ModelInfo("toy", tuple(Layer(l.name, l.param_bytes, "") for l in p.model.layers)),
                       p.setup, p.stats, p.runs)
    assert MIDDLE not in predictors.get("workspace").fit(kindless).details
    # an additive truth (Listing 1.1 exact everywhere): nothing to correct, nothing kept
    add = [7 * (i + 1) for i in range(L)]
    runs = tuple(Run(tuple(b), "ok", tuple(sum(add[a:z + 1]) + 3 for a, z in stage_windows(b)), 1.0)
                 for b in profiling_plan(L, G).runs)
    plain = Profile(p.model, p.setup, extract(runs, L), runs)
    details = predictors.get("workspace").fit(plain).details
    assert MIDDLE not in details and LAST not in details


def test_planning_for_a_gpu_leaves_the_cpu_readings_out(capsys):
    """`--for cuda` keeps the CPU fit's additive part: the positional readings (CPU peaks of
    an embedding's backward or a head's loss) are left out like the other CPU-only terms."""
    import json
    from mcap.cli.main import main
    from pathlib import Path
    data = DATA
    assert main(["predict", "--profile", str(data / "gpt2-l12-h256-s256-cpu4.profile.json"),
                 "--balance", "1,6,7,1", "--for", "cuda", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["predicted_peak"] > 0
