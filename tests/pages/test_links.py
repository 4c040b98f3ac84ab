"""Dashboard links (query strings) and the datasets they choose: a link naming something
that cannot be used is said, never replaced silently (issue 38, item 6); a profile brings
its sweep (issue 40, item 1)."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mcap.io import datasets
from tests.conftest import APP

pytestmark = pytest.mark.app
TIMEOUT = 30
GPT2 = "bundled:gpt2-l12-h256-s256-cpu4.profile.json"
GPT2_SWEEP = "bundled:gpt2-l12-h256-s256-cpu4-full.sweep.json"
PRESS = "bundled:vgg11-b8-never-cpu4-press.profile.json"


@pytest.fixture(autouse=True)
def empty_store(tmp_store):
    return tmp_store


def opened(name: str, **params) -> AppTest:
    """The page ``name`` opened by a link with ``params``: a fresh session whose first run is
    that page, as a browser's (a page's file name is its url_path, so AppTest finds it
    before the first run)."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    for key, value in params.items():
        at.query_params[key] = str(value)
    if name != "overview":
        at.switch_page(f"pages/{name}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def said(at: AppTest, key: str) -> list[str]:
    return [w.value for w in at.warning if f"link's {key}=" in w.value]


# (the link's value, what the warning gives as the reason)
BAD_PROFILES = [("../../etc/passwd", "is not of the form"),
                ("bundled:../../etc/passwd", "is not a file in the data folder"),
                ("upload:x@y", "is not on this server"),
                ("store:profile:99", "has no profile 99"),
                ("bundled:a\x00b.profile.json", "control character"),
                ("bundled:" + "a" * 5000, "5,008 characters"),
                ("bundled:vgg11-h512-b8-cpu4-full.sweep.json", "is a sweep, not a profile")]
PAGES = ("overview", "layers", "predict", "space", "recommend", "hybrid", "savers",
         "explained", "present")


@pytest.mark.parametrize("value,why", BAD_PROFILES, ids=[b[1] for b in BAD_PROFILES])
def test_a_link_naming_an_unusable_profile_is_said_and_replaced_in_the_url(value, why):
    at = opened("layers", profile=value)
    warnings = said(at, "profile")
    assert len(warnings) == 1 and why in warnings[0], [w.value for w in at.warning]
    assert "showing vgg11-h512-b8-cpu4.profile.json instead" in warnings[0]
    assert at.query_params["profile"] == "bundled:vgg11-h512-b8-cpu4.profile.json"


@pytest.mark.parametrize("name", PAGES)
def test_every_page_says_a_bad_dataset_link_once(name):
    at = opened(name, profile="../../etc/passwd", sweep="store:sweep:7")
    assert len(said(at, "profile")) == 1, [w.value for w in at.warning]
    if name in ("overview", "predict", "space", "recommend", "explained", "present"):
        assert len(said(at, "sweep")) == 1 and "has no sweep 7" in said(at, "sweep")[0]
    at.run()  # once per session: not again on the next run
    assert not said(at, "profile")


def test_method_time_on_recommend_is_said_not_silently_exact():
    at = opened("recommend", method="time")
    warnings = said(at, "method")
    assert len(warnings) == 1 and "baseline" in warnings[0] and "showing exact" in warnings[0]
    assert at.selectbox(key="rec-method").value == "exact"


def test_a_balance_that_is_no_partitioning_of_the_model_is_said():
    long = ",".join(["1"] * 10**5)  # 200 KB: under Streamlit's limit on a query string
    for name, value in (("space", "junk"), ("space", long), ("savers", "1,2")):
        at = opened(name, balance=value, **({"profile": PRESS} if name == "savers" else {}))
        warnings = said(at, "balance")
        assert len(warnings) == 1, (name, [w.value for w in at.warning])
        assert len(warnings[0]) < 400  # the value is shown by its start, not whole
        assert at.query_params.get("balance") != value


def test_a_scale_link_naming_no_file_is_said():
    at = opened("scaling", scale="bundled:" + "a" * 5000)
    assert len(said(at, "scale")) == 1


# --- a profile brings its sweep (issue 40, item 1) ----------------------------------------

def test_choosing_a_profile_on_overview_chooses_its_sweep():
    at = opened("overview")
    at.selectbox(key="choose-profile").set_value(GPT2).run()
    assert at.query_params["sweep"] == GPT2_SWEEP
    assert at.selectbox(key="choose-sweep").value == GPT2_SWEEP
    assert any("The sweep follows the profile" in c.value for c in at.caption)
    # every page then compares with it: no "not shown" note
    at.switch_page("pages/predict.py").run()
    assert not any("are not shown" in c.value for c in at.caption)
    measured = [m.value for m in at.metric if m.label == "measured peak"]
    assert measured and measured[0].endswith("MiB"), measured  # the even split was measured


def test_a_link_with_a_profile_only_opens_its_sweep():
    at = opened("overview", profile=GPT2)
    assert at.query_params["sweep"] == GPT2_SWEEP
    assert not said(at, "sweep")


def test_a_profile_without_a_sweep_keeps_the_sweep_and_says_the_mismatch_once():
    at = opened("overview")
    sweep = at.query_params["sweep"]
    at.selectbox(key="choose-profile").set_value(PRESS).run()
    assert at.query_params["sweep"] == sweep
    notes = [c.value for c in at.caption if "are not shown" in c.value]
    assert len(notes) == 1, notes
    assert "vgg11-b8-never-cpu4-press.profile.json" in notes[0]
    assert datasets.parse_ref(sweep).key in notes[0]


def test_an_uploaded_profile_brings_its_sweep():
    at = opened("overview")
    data = (datasets.datasets_dir() / GPT2.split(":", 1)[1]).read_bytes()
    at.get("file_uploader")[0].upload("mine.profile.json", data, "application/json").run()
    assert at.query_params["profile"].startswith("upload:mine.profile.json@")
    assert at.query_params["sweep"] == GPT2_SWEEP


# --- Predict keeps its pick mode (issue 40, item 4) ----------------------------------------

def test_predict_keeps_its_pick_mode_after_a_visit_to_another_page():
    at = opened("predict")
    at.radio(key="pick-mode").set_value("per stage").run()
    assert at.query_params["pick"] == "per-stage"
    at.switch_page("pages/layers.py").run()
    at.switch_page("pages/predict.py").run()
    assert at.radio(key="pick-mode").value == "per stage"
    assert at.number_input(key="pick-stages").value == 4


def test_a_link_opens_predict_in_its_pick_mode_and_a_bad_one_is_said():
    at = opened("predict", pick="recommended")
    assert at.radio(key="pick-mode").value == "from a recommendation"
    at = opened("predict", pick="sideways")
    assert len(said(at, "pick")) == 1 and at.radio(key="pick-mode").value == "type it"


# --- plain words in the prose a room reads (issue 40, item 12) ------------------------------

import re  # noqa: E402

_NOT_PROSE = (re.compile(r"\bmcap\.[a-z_]+\.[a-z_]+"), re.compile(r"python -m"),
              re.compile(r"(?<![\w-])--[a-z][a-z-]+"), re.compile(r"\b[\w-]+\.py\b"))


@pytest.mark.parametrize("name", PAGES + ("scaling",))
def test_no_module_names_flags_or_scripts_in_the_prose_of_a_page(name):
    at = opened(name, **({"profile": PRESS} if name == "savers" else {}))
    prose = [e.value for kind in ("markdown", "caption", "info", "warning", "success", "title",
                                  "subheader", "error") for e in at.get(kind)]
    found = [(p.pattern, text[:160]) for text in prose for p in _NOT_PROSE if p.search(text)]
    assert not found, found
