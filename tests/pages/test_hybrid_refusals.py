"""An impossible or extrapolated hybrid plan is said, never dropped silently (issue 38, item
5): ``predict --plan 10:tp65536`` printed 65,536 devices for a model of 4 heads, and the
Hybrid plans page replaced the same plan of a link by the recommended one without a word."""
from __future__ import annotations

import json
import shutil

import pytest
from streamlit.testing.v1 import AppTest

from mcap.core.capture.plan import parse_plan
from mcap.core.capture.plan import parse_mesh
from mcap.core.capture.predict import HybridCosts, recommend_mesh
from mcap.core.errors import McapError
from mcap.io import jsonio
from mcap.models.spec import tensor_parallel_sizes
from tests.conftest import APP, DATA, cli

DPTP = DATA / "gpt-l8-h128-cpu8-dptp.profile.json"  # heads 4, hidden 128; dp/tp 2 and 4


def test_a_tp_degree_must_divide_what_tensor_parallelism_splits(capsys):
    code, out, err = cli(capsys, "predict", "--profile", DPTP, "--plan", "10:tp65536")
    assert code == 2 and out == ""
    assert "tp65,536 stage cannot exist" in err and "heads (4), hidden (128), ffn (512)" in err
    code, _, err = cli(capsys, "predict", "--profile", DPTP, "--plan", "2,8:tp8")
    assert code == 2 and "8 does not divide its heads (4)" in err and "hidden" not in \
        err.split("does not divide")[1]


def test_a_degree_beyond_the_profiled_ones_is_called_an_extrapolation(capsys):
    code, out, _ = cli(capsys, "predict", "--profile", DPTP, "--plan", "2,8:dp8")
    assert code == 0 and "dp8 is beyond the dp degrees the profile measured (2, 4)" in out
    code, out, _ = cli(capsys, "predict", "--profile", DPTP, "--plan", "2,8:dp8", "--json")
    assert code == 0 and json.loads(out)["notes"][0].startswith("dp8 is beyond")
    code, out, _ = cli(capsys, "predict", "--profile", DPTP, "--plan", "2,4:tp4,4:dp4", "--json")
    assert code == 0 and json.loads(out)["notes"] == []  # measured degrees: nothing to say


def test_the_mesh_search_leaves_such_degrees_out_and_says_why():
    profile = jsonio.load_profile(DPTP)
    sizes = tensor_parallel_sizes(profile.model.spec)
    rec = recommend_mesh(profile, parse_mesh("1x8"), tp_sizes=sizes)
    assert all(not (s.parallel == "tp" and s.degree == 8) for s in rec.plan.stages)
    assert any("tp8 stage cannot exist" in m for m in rec.missing), rec.missing
    with pytest.raises(McapError, match="does not divide"):
        HybridCosts(profile, tp_sizes=sizes).peaks(parse_plan("2,8:tp8"))


@pytest.fixture
def dptp_data(tmp_path, monkeypatch, tmp_store):
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(DPTP, folder / DPTP.name)
    monkeypatch.setenv("MCAP_DATA_DIR", str(folder))


def _hybrid(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["profile"] = f"bundled:{DPTP.name}"
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    at.switch_page("pages/hybrid.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


@pytest.mark.app
def test_the_page_says_why_a_plan_of_a_link_is_not_shown(dptp_data):
    at = _hybrid(mesh="1x8", plan="10:tp8")
    said = [w.value for w in at.warning if "10:tp8" in w.value]
    assert said and "does not divide its heads (4)" in said[0], [w.value for w in at.warning]
    assert "showing the recommended plan" in said[0]
    at = _hybrid(plan="10:tp65536")
    assert any("10:tp65536" in w.value and "65536 devices but mesh 1x8 has 8" in w.value
               for w in at.warning), [w.value for w in at.warning]


@pytest.mark.app
def test_the_page_refuses_a_typed_impossible_plan_and_warns_of_an_extrapolated_one(dptp_data):
    at = _hybrid(mesh="1x8")
    typed = [t for t in at.text_input if t.key.startswith("hybrid-plan-")][0]
    typed.set_value("10:tp8").run()
    assert any("does not divide its heads (4)" in e.value for e in at.error), \
        [e.value for e in at.error]
    typed = [t for t in at.text_input if t.key.startswith("hybrid-plan-")][0]
    typed.set_value("10:dp8").run()
    assert not at.exception
    assert any("dp8 is beyond the dp degrees the profile measured (2, 4)" in w.value
               for w in at.warning), [w.value for w in at.warning]
