"""The command line's contract for hybrid plans (issue 15, Deliver 6): ``recommend --mesh``
prints plan_text / plan / predicted_peaks (one per device, in stage order), ``predict --plan``
prints predicted_peaks, and bad plans exit 2 naming the numbers. The profile is a file with
constructed dp/tp variants (the statistics are Listing 1.1 numbers we can check by hand)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from mcap.cli.main import main
from mcap.core.capture.plan import check_plan, parse_mesh, parse_plan
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Setup, VariantStats
from mcap.io import jsonio

L = 12


def stats(scale: float) -> LayerStats:
    return LayerStats(tuple(int(scale * (1000 + 97 * ((i * 5) % 7))) for i in range(L)),
                      (None,) + tuple(int(scale * (300 - 40 * (i % 4))) for i in range(1, L)))


def listing(s: LayerStats, a: int, z: int) -> int:
    return s.mem_isolated[a] + sum(s.mem_added[a + 1:z + 1])


VARIANTS = (VariantStats(16, stats(0.7), "dp", 2), VariantStats(16, stats(0.55), "dp", 4),
            VariantStats(16, stats(0.6), "tp", 2), VariantStats(16, stats(0.4), "tp", 4))


def save(tmp_path, variants, name="p.json"):
    prof = Profile(model=ModelInfo("toy", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(L))),
                   setup=Setup(stages=4, batch_size=16, engine="hybrid"), stats=stats(1.0),
                   variants=variants)
    path = tmp_path / name
    jsonio.save(prof, path)
    return str(path)


@pytest.fixture
def hybrid(tmp_path):
    return save(tmp_path, VARIANTS)


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("mesh", ["1x4", "2x4"])
def test_recommend_mesh_json_contract(capsys, hybrid, mesh):
    code, out, _ = run(capsys, "recommend", "--profile", hybrid, "--mesh", mesh, "--json")
    assert code == 0
    d = json.loads(out)
    assert {"plan_text", "plan", "predicted_peaks", "seconds", "evaluated"} <= set(d)
    m = parse_mesh(mesh)
    plan = check_plan(parse_plan(d["plan_text"]), L, m)  # the text parses back and fits
    assert plan.as_json() == d["plan"] and len(d["predicted_peaks"]) == m.devices
    assert d["predicted_peak"] == max(d["predicted_peaks"]) and d["kinds"] == ["dp", "tp"]
    # predict --plan on the recommended plan says the same peaks
    code, out, _ = run(capsys, "predict", "--profile", hybrid, "--plan", d["plan_text"], "--json")
    assert code == 0 and json.loads(out)["predicted_peaks"] == d["predicted_peaks"]
    # Algorithm 4, with and without pruning, picks the DP's plan
    for extra in ([], ["--no-prune"]):
        code, out, _ = run(capsys, "recommend", "--profile", hybrid, "--mesh", mesh, "--method",
                           "enumerate", *extra, "--json")
        e = json.loads(out)
        assert code == 0 and e["plan_text"] == d["plan_text"] and e["prune"] == (not extra)


def test_predict_plan_peaks_per_device_in_stage_order(capsys, hybrid):
    code, out, _ = run(capsys, "predict", "--profile", hybrid, "--plan", "3,3,6:tp2", "--json")
    d = json.loads(out)
    tp2 = VARIANTS[2].stats
    assert code == 0 and d["plan"][2] == {"layers": 6, "parallel": "tp", "degree": 2}
    assert d["predicted_peaks"] == [listing(stats(1.0), 0, 2), listing(stats(1.0), 3, 5),
                                    listing(tp2, 6, 11), listing(tp2, 6, 11)]
    code, out, _ = run(capsys, "predict", "--profile", hybrid, "--plan", "4,8:dp8")
    assert code == 0 and "dp8" in out and out.count("  dp8  ") == 8  # one row per device
    # dp8 from dp2 and dp4: M(k) = R + S/k by default, III-B3's logarithmic fit on request
    m2, m4 = listing(VARIANTS[0].stats, 0, 11), listing(VARIANTS[1].stats, 0, 11)
    for fit, want in ((None, m4 - (m2 - m4) / 2), ("log", m4 - (m2 - m4))):
        code, out, _ = run(capsys, "predict", "--profile", hybrid, "--plan", "12:dp8", "--json",
                           *(["--degree-fit", fit] if fit else []))
        assert code == 0 and json.loads(out)["predicted_peaks"] == [round(want)] * 8


@pytest.mark.parametrize("argv,message", [
    (["predict", "--plan", "3,3,10:tp2"], "plan 3,3,10:tp2 places 16 layers but the model has 12"),
    (["predict", "--plan", "3,3,6:tp2", "--mesh", "2x4"],
     "plan 3,3,6:tp2 uses 4 devices but mesh 2x4 has 8"),
    (["predict", "--plan", "3,3,2:tp4,2,2", "--mesh", "2x4"],
     "stage 2 \\(4 devices\\) would span nodes 0 and 1"),
    (["predict", "--plan", "3,x"], "stage 1 is 'x'"),
    (["predict", "--plan", "6,6", "--balance", "6,6"], "not both"),
    (["recommend", "--mesh", "2x0"], "mesh '2x0' is not NxK"),
    (["recommend", "--mesh", "2x4", "--method", "bo"], "--method bo does not search a mesh"),
    (["recommend", "--mesh", "2x4", "--stages", "4"], "not both"),
    (["recommend", "--stages", "4", "--method", "enumerate"], "--method enumerate searches a mesh"),
    (["recommend"], "--stages G .* or --mesh NxK"),
    (["recommend", "--stages", "4", "--degree-fit", "log"], "--degree-fit applies to --mesh"),
    (["predict", "--balance", "6,6", "--degree-fit", "log"], "--degree-fit applies to a hybrid"),
    (["recommend", "--mesh", "4x4"], "12 layers; mesh 4x4 needs at least 16"),
    (["recommend", "--mesh", "8x1024"], "mesh 8x1024 with 12 layers means up to .* over the cap"),
])
def test_bad_input_exits_2_naming_the_numbers(capsys, tmp_path, argv, message):
    path = save(tmp_path, ())
    if "4x4" not in argv:  # the pipeline-only profile: 16 devices need 16 layers
        path = save(tmp_path, VARIANTS, "h.json")
    code, out, err = run(capsys, argv[0], "--profile", path, *argv[1:])
    assert code == 2 and out == ""
    import re
    assert re.search(message, err), err


def test_without_variants_pipeline_plans_and_the_profile_command(capsys, tmp_path):
    path = save(tmp_path, ())
    code, out, _ = run(capsys, "recommend", "--profile", path, "--mesh", "2x2", "--json")
    d = json.loads(out)
    assert code == 0 and all(s["parallel"] == "pp" for s in d["plan"]) and len(d["plan"]) == 4
    assert d["kinds"] == [] and "--parallel dp,tp" in d["missing"][0]
    code, _, err = run(capsys, "predict", "--profile", path, "--plan", "6,6:tp2", "--json")
    assert code == 2 and "no tp statistics" in err and "profile --model toy" in err
    # --balance and --stages keep meaning pipeline-only
    code, out, _ = run(capsys, "recommend", "--profile", path, "--stages", "4", "--json")
    assert code == 0 and len(json.loads(out)["balance"]) == 4


def test_the_command_line_prints_no_traceback(tmp_path):
    path = save(tmp_path, VARIANTS)
    r = subprocess.run([sys.executable, "-m", "mcap", "predict", "--profile", path, "--plan",
                        "3,3,2:tp4,2,2", "--mesh", "2x4"], capture_output=True, text=True)
    assert r.returncode == 2 and "Traceback" not in r.stderr and "span nodes" in r.stderr


# --- --batch-size with --plan / --mesh (issue 15 audit): as --balance / --stages do -------

def save_scaled(tmp_path, variants=(), name="scaled.json"):
    """A batch-scaled profile (profile --profile-batch-sizes 4,8 at target 16): pp
    statistics at 4 and 8, none of its own; ``variants`` (dp/tp) beside them."""
    from mcap.core.capture import batchscale
    base = Profile(model=ModelInfo("toy", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(L))),
                   setup=Setup(stages=4, batch_size=16, chunks=2, engine="hybrid"),
                   stats=stats(1.0), variants=tuple(variants))
    prof = batchscale.scaled_profile(base, [VariantStats(4, stats(0.4), "pp", 1),
                                            VariantStats(8, stats(0.6), "pp", 1)])
    path = tmp_path / name
    jsonio.save(prof, path)
    return str(path)


def peaks_of(capsys, *argv):
    code, out, err = run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)["predicted_peaks"]


def test_plan_and_mesh_predict_at_batch_size_on_the_profiles_line(capsys, tmp_path):
    path = save_scaled(tmp_path)
    at = {}
    for b in ("16", "32"):
        balance = peaks_of(capsys, "predict", "--profile", path, "--balance", "3,3,3,3",
                           "--batch-size", b)
        plan = peaks_of(capsys, "predict", "--profile", path, "--plan", "3,3,3,3",
                        "--batch-size", b)
        assert plan == balance  # a pipeline-only plan is the balance, at every batch size
        at[b] = plan
        mesh = peaks_of(capsys, "recommend", "--profile", path, "--mesh", "1x4", "--batch-size", b)
        stages = peaks_of(capsys, "recommend", "--profile", path, "--stages", "4",
                          "--batch-size", b)
        assert max(mesh) == max(stages)  # both the exact optimum of the same costs
    assert max(at["32"]) > max(at["16"])  # the line grows: not the target's numbers again
    code, out, _ = run(capsys, "predict", "--profile", path, "--plan", "3,3,3,3",
                       "--batch-size", "32")
    assert code == 0 and "at batch size 32 on the line through batch sizes 4 and 8" in out


def test_plan_and_mesh_refuse_a_batch_size_the_profile_cannot_predict(capsys, tmp_path):
    path = save(tmp_path, VARIANTS)  # one batch size, 16
    code, _, balance_err = run(capsys, "predict", "--profile", path, "--balance", "6,6",
                               "--batch-size", "32")
    assert code == 2 and "predicting at batch size 32 needs statistics at two" in balance_err
    for argv in (["predict", "--plan", "6,6"], ["predict", "--plan", "6,6:tp2"],
                 ["recommend", "--mesh", "1x4"]):
        code, out, err = run(capsys, argv[0], "--profile", path, *argv[1:], "--batch-size", "32")
        assert (code, out, err) == (2, "", balance_err), argv
    # at the profile's own batch size nothing changes
    assert peaks_of(capsys, "predict", "--profile", path, "--plan", "6,6:tp2",
                    "--batch-size", "16") == peaks_of(capsys, "predict", "--profile", path,
                                                      "--plan", "6,6:tp2")
    # pp on the line, but tp2 profiled at 16 only: a tp stage elsewhere is refused, naming it
    scaled = save_scaled(tmp_path, VARIANTS)
    code, _, err = run(capsys, "predict", "--profile", scaled, "--plan", "6,6:tp2",
                       "--batch-size", "32")
    assert code == 2 and "tp2 stage at batch size 32" in err and "batch size 16 only" in err
    d = json.loads(run(capsys, "recommend", "--profile", scaled, "--mesh", "1x4",
                       "--batch-size", "32", "--json")[1])
    assert d["kinds"] == [] and d["batch_size"] == 32  # pipeline-only plans on the line


def test_a_batch_size_must_split_into_the_profiles_chunks(capsys, tmp_path):
    path = save_scaled(tmp_path)  # --chunks 2
    for argv in (["predict", "--balance", "3,3,3,3"], ["predict", "--plan", "3,3,3,3"],
                 ["recommend", "--stages", "4"], ["recommend", "--mesh", "1x4"]):
        code, out, err = run(capsys, argv[0], "--profile", path, *argv[1:], "--batch-size", "3")
        assert code == 2 and out == "", argv
        assert "batch size 3 does not split into 2 equal micro-batches (the profile's " \
               "--chunks 2)" in err, err
        assert run(capsys, argv[0], "--profile", path, *argv[1:], "--batch-size", "6")[0] == 0


def test_missing_four_way_stages_name_the_eight_device_profile(capsys, tmp_path):
    """A --stages 4 profile has dp2/tp2 only (a k-way stage is profiled on 2 groups of k):
    the note names --stages 8, not the command that made this profile."""
    path = save(tmp_path, (VARIANTS[0], VARIANTS[2]))  # dp2, tp2 on 4 devices
    code, out, _ = run(capsys, "recommend", "--profile", path, "--mesh", "1x4", "--json")
    d = json.loads(out)
    assert code == 0 and d["kinds"] == ["dp", "tp"] and len(d["missing"]) == 2
    for kind, why in zip(("dp", "tp"), d["missing"]):
        assert f"{kind}4 stage" in why and f"{kind}4 needs --stages 8" in why, why
        assert "profile --model toy --stages 8 --batch-size 16" in why, why
    code, _, err = run(capsys, "predict", "--profile", path, "--plan", "12:dp8")
    assert code == 2 and "dp4 needs --stages 8" in err and "--stages 8 " in err
    # what a 4-device profile can measure keeps naming its own size
    code, _, err = run(capsys, "predict", "--profile", save(tmp_path, (), "pp.json"), "--plan",
                       "6,6:tp2")
    assert code == 2 and "--stages 4 " in err and "needs --stages" not in err


# --- merged profiles (profile --merge-to): plans in the model's real layers ----------------

def save_merged(tmp_path, name="merged.json"):
    from mcap.core.capture import merging
    prof = jsonio.load_profile(save(tmp_path, (), "unmerged.json"))
    sizes = merging.merge_sizes(prof.stats, 5)
    merged = merging.merge_profile(prof, sizes)
    path = tmp_path / name
    jsonio.save(merged, path)
    return str(path), sizes


def test_mesh_plans_of_a_merged_profile_are_in_real_layers(capsys, tmp_path):
    from mcap.app.capture import measure_plan_args
    from mcap.core.capture import merging
    path, sizes = save_merged(tmp_path)
    assert len(sizes) == 5 and sum(sizes) == L and max(sizes) > 1
    code, out, _ = run(capsys, "recommend", "--profile", path, "--mesh", "1x2", "--json")
    d = json.loads(out)
    plan = parse_plan(d["plan_text"])
    assert code == 0 and sum(plan.balance) == L and d["plan"] == plan.as_json()
    stages = json.loads(run(capsys, "recommend", "--profile", path, "--stages", "2", "--json")[1])
    assert list(plan.balance) == stages["balance"]  # both paths print real layers
    assert d["predicted_peaks"] == stages["predicted_peaks"]
    # predict --plan takes that real-layer plan back and says the same peaks
    assert peaks_of(capsys, "predict", "--profile", path, "--plan", d["plan_text"]) == \
        d["predicted_peaks"]
    # a cut inside a merged layer is refused naming it, as --balance is
    inside = next(c for c in range(1, L) if c not in set(np.cumsum(sizes)))
    code, _, err = run(capsys, "predict", "--profile", path, "--plan", f"{inside},{L - inside}")
    assert code == 2 and f"plan {inside},{L - inside}: the stage boundary after layer " \
                         f"{inside - 1} falls inside a merged layer" in err
    # what the page's "measure this plan" runs: the real model and the real-layer plan
    merged = jsonio.load_profile(path)
    argv = measure_plan_args(merged, plan)
    assert argv[argv.index("--model") + 1] == "toy" == merging.real_spec(merged)
    assert argv[argv.index("--plan") + 1] == d["plan_text"]
