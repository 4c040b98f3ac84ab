"""Data is data (issue 12, critical 1): no file, upload or stored record ever makes mcap
import a module or call a function. The hostile model module here writes a marker file the
moment it is imported; it sits on sys.path, in the working directory and in PYTHONPATH, so
any import of it would succeed, and every test asserts the marker never appears."""
from __future__ import annotations

import json
import shutil
import sys

import pytest

from mcap.cli.main import main
from mcap.core.errors import McapError
from tests.conftest import APP, DATA

MODULE = "mcap_hostile_xyz"
SPEC = f"{MODULE}:make"


@pytest.fixture
def hostile(tmp_path, monkeypatch, tmp_store):
    """A folder with the hostile module and a profile and sweep whose spec names it."""
    marker = tmp_path / "MARKER"
    (tmp_path / f"{MODULE}.py").write_text(
        f"open({str(marker)!r}, 'w').write('imported')\n"
        "def make(**kw):\n"
        f"    open({str(marker)!r}, 'w').write('called')\n"
        "    raise SystemExit('hostile code ran')\n")
    data = tmp_path / "data"
    data.mkdir()
    for name, out in (("vgg11-cpu4.profile.json", "hostile.profile.json"),
                      ("vgg11-cpu4-sample300.sweep.json", "hostile.sweep.json")):
        d = json.loads((DATA / name).read_text())
        d["model"]["spec"] = SPEC
        (data / out).write_text(json.dumps(d))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    sys.modules.pop(MODULE, None)
    yield data, marker
    assert not marker.exists(), "a file made mcap import the module it names"
    sys.modules.pop(MODULE, None)


def cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


def test_build_model_refuses_a_user_spec_from_data_before_importing(hostile):
    from mcap.models import UntrustedCode, build_model, count_parameters
    for call in (lambda: build_model(SPEC), lambda: build_model(SPEC, device="meta"),
                 lambda: count_parameters(SPEC)):
        with pytest.raises(UntrustedCode, match=f"user code {SPEC}"):
            call()
    assert MODULE not in sys.modules


def test_runner_refuses_before_starting_processes(hostile):
    from mcap.core.types import Setup
    from mcap.runner import open_runner
    with pytest.raises(McapError, match="mcap does not run code a file names"):
        open_runner(SPEC, Setup(stages=2, batch_size=4, chunks=2))


def test_predict_and_recommend_read_the_file_as_data(hostile, capsys):
    data, _ = hostile
    prof = str(data / "hostile.profile.json")
    code, out, _ = cli(capsys, "predict", "--profile", prof, "--balance", "3,3,5,19", "--json")
    assert code == 0 and json.loads(out)["predicted_peak"] > 0
    code, out, _ = cli(capsys, "recommend", "--profile", prof, "--stages", "4", "--json")
    assert code == 0


def test_recommend_time_says_how_to_allow_it(hostile, capsys):
    data, _ = hostile
    code, _, err = cli(capsys, "recommend", "--profile", str(data / "hostile.profile.json"),
                       "--stages", "4", "--method", "time")
    assert code == 2
    assert f"user code {SPEC}" in err and "mcap does not run code a file names" in err
    assert f"--method time --model {SPEC}" in err


def test_recommend_time_model_must_be_the_files_model(hostile, capsys):
    data, _ = hostile
    code, _, err = cli(capsys, "recommend", "--profile", str(data / "hostile.profile.json"),
                       "--stages", "4", "--method", "time", "--model", "other_mod:make")
    assert code == 2 and "is not the file's model" in err


def test_evaluate_reports_time_unavailable_with_the_note(hostile, capsys):
    data, _ = hostile
    code, out, _ = cli(capsys, "evaluate", "--profile", str(data / "hostile.profile.json"),
                       "--sweep", str(data / "hostile.sweep.json"), "--bo-iterations", "10", "--json")
    assert code == 0
    time_row = next(m for m in json.loads(out)["methods"] if m["method"] == "time")
    assert time_row["balance"] is None and "mcap does not run code a file names" in time_row["note"]
    assert f"evaluate --model {SPEC}" in time_row["note"]


def test_a_typed_model_is_honoured(tmp_path, monkeypatch, capsys):
    """The positive control: the same kind of spec typed as --model does run (so the
    refusals above are the trust rule, not a module that cannot be found)."""
    ran = tmp_path / "RAN"
    (tmp_path / "mcap_typed_model_xyz.py").write_text(
        "import torch\nfrom torch import nn\n"
        "def make():\n"
        f"    open({str(ran)!r}, 'w').write('ok')\n"
        "    seq = nn.Sequential(*[nn.Linear(8, 8) for _ in range(4)])\n"
        "    return seq, lambda b, seed=0: (torch.randn(b, 8), torch.randn(b, 8)), nn.functional.mse_loss\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    d = json.loads((DATA / "vgg11-cpu4.profile.json").read_text())
    d["model"] = {"spec": "mcap_typed_model_xyz:make",
                  "layers": [{"name": str(i), "param_bytes": 288} for i in range(4)]}
    d["mem_isolated"], d["mem_added"] = [10, 10, 10, 10], [None, 5, 5, 5]
    d["runs"] = []
    prof = tmp_path / "typed.profile.json"
    prof.write_text(json.dumps(d))
    code, out, err = cli(capsys, "recommend", "--profile", str(prof), "--stages", "2", "--method",
                         "time", "--model", "mcap_typed_model_xyz:make", "--json")
    assert code == 0, err
    assert ran.exists() and sum(json.loads(out)["balance"]) == 4


def test_dashboard_jobs_refuse_a_spec_from_a_file(hostile, tmp_path):
    from mcap.app import jobs
    from mcap.io import datasets
    from mcap.store import Store
    from pages._jobs import measure_args
    data, _ = hostile
    profile = datasets.load(datasets.parse_ref("bundled:hostile.profile.json"), data_dir=data)
    with Store(tmp_path / "store.sqlite") as s:
        with pytest.raises(McapError, match="mcap does not run code a file names"):
            jobs.launch(s, "measure", measure_args(profile, (3, 3, 5, 19)), total=1)
        assert s.list_jobs() == ()


def test_an_upload_is_data(hostile):
    from mcap.io import datasets
    from mcap.app.searches import run_method
    data, _ = hostile
    profile = datasets.load_upload("up.profile.json", (data / "hostile.profile.json").read_bytes())
    assert profile.model.spec == SPEC
    with pytest.raises(McapError, match="mcap does not run code a file names"):
        run_method(profile, 4, "time")
    assert run_method(profile, 4, "exact").balance


# --- every page with such a file as its dataset -----------------------------------------

PAGES = ("overview", "layers", "predict", "space", "recommend", "explained", "scaling", "profile")


@pytest.mark.app
@pytest.mark.parametrize("name", PAGES)
def test_every_page_shows_the_hostile_dataset_as_data(hostile, monkeypatch, name):
    from streamlit.testing.v1 import AppTest
    if name == "explained":
        from tests.conftest import warm_orders
        warm_orders()
    data, _ = hostile
    monkeypatch.setenv("MCAP_DATA_DIR", str(data))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["profile"] = "bundled:hostile.profile.json"
    at.query_params["sweep"] = "bundled:hostile.sweep.json"
    at.run()
    if name != "overview":
        at.switch_page(f"pages/{name}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    if name == "recommend":
        notes = [w.value for w in at.warning]
        assert any("mcap does not run code a file names" in n for n in notes), notes
    if name == "predict":
        at.button(key="measure-button").click().run()
        assert any("mcap does not run code a file names" in e.value for e in at.error), \
            [e.value for e in at.error]


@pytest.mark.app
def test_profile_page_runs_user_code_only_after_a_confirmation_naming_it(hostile, monkeypatch):
    """Typed in the dashboard, a user spec starts nothing until the button that names its
    module and function is pressed; then the job gets it as a TrustedSpec."""
    from streamlit.testing.v1 import AppTest
    from mcap.app import jobs
    from mcap.models.spec import TrustedSpec
    from mcap.store import Job
    launched = []

    def fake_launch(store, kind, args, total=0):
        jobs.check_model_args(args)  # the real gate, without starting a child
        launched.append((kind, list(args)))
        return Job(1, kind, tuple(args), 0, 0, None, "done", None, None, None, 0.0, 0.0)
    monkeypatch.setattr(jobs, "launch", fake_launch)
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    at.switch_page("pages/profile.py")
    at.run()
    at.text_input(key="profile-spec").input(SPEC)
    at.button(key="profile-start").click().run()
    assert launched == [] and not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert f"import the module `{MODULE}`" in warning and "call its function `make`" in warning
    at.button(key="profile-confirm-run").click().run()
    assert len(launched) == 1
    args = launched[0][1]
    spec = args[args.index("--model") + 1]
    assert isinstance(spec, TrustedSpec) and spec == SPEC
