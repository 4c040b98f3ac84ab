"""``--blocks M`` on predict, recommend and evaluate (issue 41, item 3): a shallow profile
predicts the same model with M blocks, whose layers are the ones mcap would build."""
import json

import pytest

from mcap.cli.main import main
from mcap.core.deepen import deep_model, shallow_blocks
from mcap.core.profiling.schedule import profiling_plan
from mcap.core.profiling.stats import extract, stage_windows
from mcap.core.types import LayerStats, Profile, Run, Setup, Sweep
from mcap.io import jsonio
from mcap.models import build_model
from mcap.models.spec import with_blocks

SHALLOW = "gpt:layers=6,hidden=64,heads=4,vocab=256,seq=16"


def peak(a: int, z: int, info) -> int:
    """Weights, gradients and momentum of the stage's layers, and a transient linear in its
    blocks within each kind of stage: first, middle, last."""
    L = info.num_layers
    k = max(0, min(z, L - 2) - max(a, 1) + 1)
    held = 3 * sum(l.param_bytes for l in info.layers[a:z + 1])
    return held + (1_000 if a == 0 else 0) + (2_500 if z == L - 1 else 0) + 300 * k + 50


def runs_of(balances, info):
    return tuple(Run(tuple(b), "ok", tuple(peak(a, z, info) for a, z in stage_windows(b)), 1.0)
                 for b in balances)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("deep")
    info = build_model(SHALLOW, device="meta").info
    runs = runs_of(profiling_plan(info.num_layers, 4, "capture").runs, info)
    profile = Profile(info, Setup(stages=4), extract(runs, info.num_layers), runs)
    deep = build_model(with_blocks(SHALLOW, 20), device="meta").info
    from itertools import combinations
    balances = [tuple(b - a for a, b in zip((0, *cuts), (*cuts, deep.num_layers)))
                for cuts in list(combinations(range(1, deep.num_layers), 3))[::37]]
    jsonio.save(profile, d / "p.profile.json")
    jsonio.save(Sweep(deep, Setup(stages=4), runs_of(balances, deep)), d / "s.sweep.json")
    return d / "p.profile.json", d / "s.sweep.json", info, deep


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_the_deep_model_is_the_one_mcap_builds(files):
    _, _, info, deep = files
    profile = Profile(info, Setup(stages=4), LayerStats((1,) * info.num_layers,
                                                        (None,) + (1,) * (info.num_layers - 1)))
    assert deep_model(info, shallow_blocks(profile), 20, deep.spec) == deep


def test_predict_recommend_and_evaluate_a_deeper_model(capsys, files):
    p, s, _, deep = files
    L = deep.num_layers
    code, out, _ = run(capsys, "predict", "--profile", str(p), "--blocks", "20", "--balance",
                       "6,6,5,5", "--json")  # 20 blocks + 2 = 22 layers
    assert code == 0
    bounds = stage_windows((6, 6, 5, 5))
    assert json.loads(out)["predicted_peaks"] == [peak(a, z, deep) for a, z in bounds]
    code, out, _ = run(capsys, "recommend", "--profile", str(p), "--blocks", "20", "--stages", "4",
                       "--json")
    rec = json.loads(out)
    assert code == 0 and sum(rec["balance"]) == L
    code, out, err = run(capsys, "evaluate", "--profile", str(p), "--blocks", "20", "--sweep",
                         str(s), "--json", "--no-time", "--bo-iterations", "12")
    got = json.loads(out)
    assert code == 0, err
    assert got["spec"] == deep.spec and got["error"]["max"] == 0.0


def test_blocks_of_a_model_without_them_exit_2(capsys, tmp_path):
    from tests.conftest import DATA
    code, _, err = run(capsys, "recommend", "--profile", str(DATA / "vgg11-cpu4.profile.json"),
                       "--blocks", "8", "--stages", "4")
    assert code == 2 and "has no block count to change" in err and "Traceback" not in err
    code, _, err = run(capsys, "predict", "--profile", str(DATA / "vgg11-cpu4.profile.json"),
                       "--blocks", "0", "--balance", "1,29")
    assert code == 2 and "--blocks" in err


def test_blocks_with_what_reads_the_profile_as_it_is_exit_2(capsys, files):
    p = str(files[0])
    for extra, flag in ((["--mesh", "2x2"], "--mesh"), (["--stages", "4", "--capacity", "1GiB"], "--capacity")):
        code, _, err = run(capsys, "recommend", "--profile", p, "--blocks", "20", *extra)
        assert code == 2 and f"does not combine with {flag}" in err
    code, _, err = run(capsys, "predict", "--profile", p, "--blocks", "20", "--balance", "6,6,5,5",
                       "--for", "cuda")
    assert code == 2 and "--blocks 20 with --for cuda" in err
