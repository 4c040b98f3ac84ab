import json
import subprocess
import sys

import pytest

from mcap.io import jsonio
from mcap.cli.main import main
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Setup

L = 10


@pytest.fixture
def profile_path(tmp_path):
    prof = Profile(model=ModelInfo("toy", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(L))),
                   setup=Setup(stages=4),
                   stats=LayerStats(tuple(1000 + 37 * ((i * 5) % 7) for i in range(L)),
                                    (None,) + tuple(50 - 20 * (i % 3) for i in range(1, L))))
    path = tmp_path / "p.json"
    jsonio.save(prof, path)
    return path


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_plan_json_and_table(capsys):
    code, out, _ = run(capsys, "plan", "--layers", "30", "--stages", "4", "--json")
    d = json.loads(out)
    assert code == 0 and len(d["runs"]) == 27 and d["runs"][-1] == [27, 1, 1, 1]
    code, out, _ = run(capsys, "plan", "--layers", "30", "--stages", "4", "--scheme", "capture")
    assert code == 0 and "scheme capture" in out


def test_predict_json(capsys, profile_path):
    code, out, _ = run(capsys, "predict", "--profile", str(profile_path), "--balance", "3,3,2,2", "--json")
    d = json.loads(out)
    assert code == 0 and set(d) == {"predictor", "balance", "predicted_peaks", "predicted_peak"}
    assert d["predicted_peak"] == max(d["predicted_peaks"]) and len(d["predicted_peaks"]) == 4
    code, out, _ = run(capsys, "predict", "--profile", str(profile_path), "--balance", "5,5")
    assert code == 0 and "predicted peak" in out


@pytest.mark.parametrize("method", ["exact", "bf", "uniform", "params"])
def test_recommend_json(capsys, profile_path, method):
    code, out, _ = run(capsys, "recommend", "--profile", str(profile_path), "--stages", "3",
                       "--method", method, "--json")
    d = json.loads(out)
    assert code == 0
    assert set(d) == {"method", "predictor", "balance", "predicted_peaks", "predicted_peak", "seconds",
                      "evaluated"}
    assert d["method"] == method and sum(d["balance"]) == L and len(d["balance"]) == 3


def test_recommend_bo_seeded(capsys, profile_path):
    args = ["recommend", "--profile", str(profile_path), "--stages", "3", "--method", "bo",
            "--iterations", "12", "--seed", "3", "--json"]
    a = json.loads(run(capsys, *args)[1])
    b = json.loads(run(capsys, *args)[1])
    assert a["balance"] == b["balance"] and a["evaluated"] == 12


@pytest.mark.parametrize("argv,needle", [
    (["predict", "--balance", "3,3,5,18"], "sums to 29 but the model has 10 layers"),
    (["predict", "--balance", "3,0,7"], "0 layers on stage 1"),
    (["predict", "--balance", "1,1,1,1,1,1,1,1,1,1,1"], "11 stages but the model has only 10 layers"),
    (["recommend", "--stages", "0"], "got 0"),
    (["recommend", "--stages", "11"], "11 stages but the model has only 10 layers"),
    (["plan", "--layers", "4", "--stages", "4"], "needs at least 5 layers"),
    (["plan", "--layers", "4", "--stages", "0"], "got 0"),
])
def test_bad_input_exits_2_with_one_line(capsys, profile_path, argv, needle):
    if argv[0] != "plan":
        argv = argv[:1] + ["--profile", str(profile_path)] + argv[1:]
    code, out, err = run(capsys, *argv)
    assert code == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("content,needle", [
    ('{"schema": "mcap.sweep/1"}', "expected schema 'mcap.profile/1', found 'mcap.sweep/1'"),
    ('{"schema": "mcap.profile/1", "model": ', "truncated"),
    (None, "no such file"),
])
def test_bad_files_exit_2(capsys, tmp_path, content, needle):
    path = tmp_path / "f.json"
    if content is not None:
        path.write_text(content)
    code, _, err = run(capsys, "predict", "--profile", str(path), "--balance", "1,1")
    assert code == 2 and needle in err


def test_nan_statistics_exit_2(capsys, tmp_path, profile_path):
    d = json.loads(profile_path.read_text())
    d["mem_isolated"][3] = -7
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    code, _, err = run(capsys, "recommend", "--profile", str(bad), "--stages", "2")
    assert code == 2 and "mem_isolated[3]" in err and "-7" in err  # refused as it is read


def test_real_process_exit_codes(profile_path):
    ok = subprocess.run([sys.executable, "-m", "mcap", "predict", "--profile", str(profile_path),
                         "--balance", "5,5", "--json"], capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["predicted_peak"] > 0
    bad = subprocess.run([sys.executable, "-m", "mcap", "predict", "--profile", str(profile_path),
                          "--balance", "5,4"], capture_output=True, text=True)
    assert bad.returncode == 2 and "sums to 9 but the model has 10 layers" in bad.stderr
    assert "Traceback" not in bad.stderr
