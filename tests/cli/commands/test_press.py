"""``python -m mcap press``: the contract keys, the plan file, and exit 2 with the values."""
import json

import pytest

from mcap.cli.main import main
from mcap.core.press.actions import plan_from_json
from mcap.io import jsonio
from tests.conftest import PRESS_BAL, PRESS_DATA, press_capacities, press_profile

DATA = PRESS_DATA
BAL = PRESS_BAL
CAP, JOINT_CAP, TOP = press_capacities()


@pytest.fixture
def prof(tmp_path):
    path = tmp_path / "p.json"
    jsonio.save(press_profile(), path)
    return path


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize("method", ["mpress", "milp"])
def test_contract_keys_and_plan_file(capsys, prof, tmp_path, method):
    out_file = tmp_path / "plan.json"
    code, out, err = run(capsys, "press", "--profile", str(prof), "--balance", BAL,
                         "--capacity", str(CAP), "--method", method, "--json",
                         "--out", str(out_file))
    assert code == 0, err
    d = json.loads(out)
    assert {"plan", "predicted_peaks", "predicted_added_seconds"} <= set(d)
    assert max(d["predicted_peaks"]) <= CAP < max(d["peaks_before"]) == TOP
    assert [len(s) for s in d["plan"]] == [13, 3, 1, 13]
    actions = {a["action"] for s in d["plan"] for a in s}
    assert actions - {"keep"} and actions <= {"keep", "recompute", "swap", "d2d"}
    assert all("target" in a for s in d["plan"] for a in s if a["action"] == "d2d")
    plan = plan_from_json(json.loads(out_file.read_text()))
    assert plan.method == method and list(plan.predicted_peaks) == d["predicted_peaks"]
    # the table form and a re-run replacing its own earlier file
    code, out, _ = run(capsys, "press", "--profile", str(prof), "--balance", BAL,
                       "--capacity", f"{CAP / 2**20:.1f}MiB", "--out", str(out_file))
    assert code == 0 and "predicted added time" in out and "wrote" in out


def test_unreachable_capacity_exits_2_naming_the_smallest(capsys, prof):
    code, _, err = run(capsys, "press", "--profile", str(prof), "--balance", BAL,
                       "--capacity", "10MiB", "--json")
    assert code == 2 and "smallest capacity that can be met is" in err
    least = int(err.split("met is ")[1].split(" bytes")[0].replace(",", ""))
    code, out, _ = run(capsys, "press", "--profile", str(prof), "--balance", BAL,
                       "--capacity", str(least), "--json")
    assert code == 0 and max(json.loads(out)["predicted_peaks"]) <= least


@pytest.mark.parametrize("argv, words", [
    (["--capacity", "lots"], "capacity 'lots' is not a size"),
    (["--capacity", "1GiB", "--method", "ilp"], "invalid choice: 'ilp'"),
    (["--capacity", "1GiB", "--balance", "13,3,1,12"], "13,3,1,12"),
])
def test_bad_input_exits_2(capsys, prof, argv, words):
    args = ["press", "--profile", str(prof), "--balance", BAL] + argv
    code, _, err = run(capsys, *args)
    assert code == 2 and words in err and "Traceback" not in err


def test_refusals_name_the_cause(capsys, prof, tmp_path):
    code, _, err = run(capsys, "press", "--profile", str(prof), "--balance", BAL,
                       "--capacity", "1GiB", "--out", str(prof))
    assert code == 2 and "also an input" in err
    other = tmp_path / "other.json"
    other.write_text('{"schema": "mcap.sweep/1"}')
    code, _, err = run(capsys, "press", "--profile", str(prof), "--balance", BAL,
                       "--capacity", "1GiB", "--out", str(other))
    assert code == 2 and "mcap.sweep/1" in err and other.read_text() == '{"schema": "mcap.sweep/1"}'
    ck = tmp_path / "ck.json"
    jsonio.save(press_profile("except_last"), ck)
    code, _, err = run(capsys, "press", "--profile", str(ck), "--balance", BAL, "--capacity", "1GiB")
    assert code == 2 and "checkpoint 'except_last'" in err and "--checkpoint never" in err
    code, _, err = run(capsys, "press", "--profile", DATA, "--balance", BAL, "--capacity", "1GiB")
    assert code == 2 and "--press" in err


def test_recommend_press_returns_the_fastest_that_fits(capsys, prof):
    code, out, err = run(capsys, "recommend", "--profile", str(prof), "--stages", "4",
                         "--capacity", str(JOINT_CAP), "--press", "--json")
    assert code == 0, err
    d = json.loads(out)
    assert max(d["predicted_peaks"]) <= JOINT_CAP and sum(d["balance"]) == 30
    fits = [c["added_seconds"] for c in d["candidates"] if c["added_seconds"] is not None]
    assert d["predicted_added_seconds"] == pytest.approx(min(fits))
    # partitioning alone does not fit this capacity: the plan is what makes it fit
    code, out, _ = run(capsys, "recommend", "--profile", str(prof), "--stages", "4", "--json")
    assert json.loads(out)["predicted_peak"] > JOINT_CAP


@pytest.mark.parametrize("argv, words", [
    (["--press"], "needs --capacity"),
    (["--capacity", "1GiB"], "add --press"),
    (["--press", "--capacity", "10MiB"], "smallest capacity that can be met is"),
    (["--press", "--capacity", "1GiB", "--method", "bf"], "drop --method bf"),
])
def test_recommend_press_refusals(capsys, prof, argv, words):
    code, _, err = run(capsys, "recommend", "--profile", str(prof), "--stages", "4", *argv)
    assert code == 2 and words in err


def test_press_never_imports_torch(prof):
    import subprocess
    import sys
    code = ("import sys; from mcap.cli.main import main; "
            f"rc = main(['press', '--profile', {str(prof)!r}, '--balance', '{BAL}', "
            f"'--capacity', '{CAP}', '--json']); "
            "assert rc == 0 and 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
