"""A file whose parts disagree is refused where it is loaded, on every path (issue 38, item
4): an uploaded profile with ``setup.stages`` 100 over 30 layers crashed the Recommend page
(``StreamlitValueAboveMaxError: 100 > max_value 30``) while the CLI loaded it. Now the CLI,
the pages' uploads, the data folder and the store all refuse it, saying the file is
inconsistent and why."""
from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from mcap.core.errors import McapError, SchemaError
from mcap.io import datasets, jsonio
from mcap.store import Store
from tests.conftest import APP, DATA, cli

PROFILE = DATA / "vgg11-cpu4.profile.json"
SWEEP = DATA / "vgg11-cpu4-sample300.sweep.json"


def edited(source=PROFILE, **changes) -> dict:
    d = json.loads(source.read_text())
    for path, value in changes.items():
        *parents, key = path.split("__")
        node = d
        for p in parents:
            node = node[int(p)] if p.isdigit() else node[p]
        node[int(key) if key.isdigit() else key] = value
    return d


CASES = [
    ({"setup__stages": 100}, "setup.stages is 100 but its model has 30 layers"),
    ({"runs__0__balance": [3, 3, 24], "runs__0__peaks": [1, 2, 3], "runs__0__breakdown": None,
      "runs__0__times": None}, "runs[0] has 3 stages (3,3,24) but setup.stages is 4"),
    ({"runs__0__peaks": [1, 2, 3]}, "runs[0].peaks: inconsistent: 3 peaks for 4 stages"),
    ({"runs__0__balance": [3, 3, 5, 1]}, "inconsistent: balance [3, 3, 5, 1] (sum 12)"),
    ({"mem_added": [None] * 29}, "the model has 30 layers but mem_isolated has 30 entries "
                                 "and mem_added has 29"),
    ({"setup__capacity_bytes": 2**20}, "is marked ok with a peak of"),
]


@pytest.mark.parametrize("changes,needle", CASES)
def test_the_cli_refuses_an_inconsistent_profile_naming_why(capsys, tmp_path, changes, needle):
    path = tmp_path / "x.profile.json"
    path.write_text(json.dumps(edited(**changes)))
    for argv in (["predict", "--profile", path, "--balance", "3,3,5,19"],
                 ["recommend", "--profile", path, "--stages", "4"]):
        code, _, err = cli(capsys, *argv)
        assert code == 2 and "inconsistent" in err and needle in err, err
        assert "x.profile.json" in err


def test_a_sweep_is_checked_the_same(capsys, tmp_path):
    path = tmp_path / "x.sweep.json"
    path.write_text(json.dumps(edited(SWEEP, setup__stages=3)))
    code, _, err = cli(capsys, "evaluate", "--profile", PROFILE, "--sweep", path)
    assert code == 2 and "the sweep is inconsistent" in err and "setup.stages is 3" in err


def test_uploads_and_the_store_refuse_it_too(tmp_path):
    data = json.dumps(edited(setup__stages=100)).encode()
    with pytest.raises(SchemaError, match="'x.profile.json'.*inconsistent: setup.stages is 100"):
        datasets.load_upload("x.profile.json", data)
    good = jsonio.load_profile(PROFILE)
    import dataclasses
    bad = dataclasses.replace(good, setup=dataclasses.replace(good.setup, stages=100))
    with Store(tmp_path / "s.sqlite") as s:
        with pytest.raises(McapError, match="setup.stages is 100"):
            s.save_profile(bad)  # the store refuses to write what it could not read back


@pytest.mark.app
@pytest.mark.parametrize("changes,needle", CASES[:2])
def test_the_dashboard_shows_the_refusal_of_an_upload(tmp_store, changes, needle):
    at = AppTest.from_file(APP, default_timeout=60)
    at.run()
    data = json.dumps(edited(**changes)).encode()
    at.get("file_uploader")[0].upload("x.profile.json", data, "application/json").run()
    assert not at.exception, [e.value for e in at.exception]
    shown = [e.value for e in at.error]
    assert any("x.profile.json" in e and "inconsistent" in e and needle in e for e in shown), shown
    at.switch_page("pages/recommend.py")
    at.run()  # the page that crashed opens on the data it can use
    assert not at.exception, [e.value for e in at.exception]


@pytest.mark.app
def test_the_dashboard_shows_the_refusal_of_a_file_in_the_data_folder(tmp_store, tmp_path,
                                                                       monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    (data / "x.profile.json").write_text(json.dumps(edited(setup__stages=100)))
    monkeypatch.setenv("MCAP_DATA_DIR", str(data))
    at = AppTest.from_file(APP, default_timeout=60)
    at.query_params["profile"] = "bundled:x.profile.json"
    at.run()
    at.switch_page("pages/recommend.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("inconsistent: setup.stages is 100" in e.value for e in at.error), \
        [e.value for e in at.error]
