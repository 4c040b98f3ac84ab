"""The Memory savers page (AppTest): a profile with MPress statistics gets its plan, bars and
grid, and a measure button that writes the plan file and launches ``measure --press``; a
profile without them is told which command adds them; bad input is named."""
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from mcap.core.press.actions import plan_from_json
from mcap.store import Store
from tests.conftest import APP, press_capacities, press_profile

CAP, _, TOP = press_capacities()

pytestmark = pytest.mark.app


@pytest.fixture
def stored(tmp_store):
    path = tmp_store
    s = Store(path)
    pid = s.save_profile(press_profile(), name="vgg11 press")
    s.close()
    return path, f"store:profile:{pid}"


def page(**params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page("pages/savers.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def test_plan_bars_grid_and_measure_button(stored):
    path, ref = stored
    at = page(profile=ref, balance="13,3,1,13")
    at.number_input(key="savers-capacity").set_value(round(CAP / 2**20, 2)).run()
    cap = int(round(CAP / 2**20, 2) * 2**20)
    assert not at.error, [e.value for e in at.error]
    table = next(d.value for d in at.dataframe if "after (MiB)" in d.value.columns)
    assert (table["after (MiB)"] <= cap / 2**20 + 0.01).all()
    assert (table["before (MiB)"] > cap / 2**20).any()
    assert metric(at, "peak before") == f"{TOP / 2**20:.2f} MiB"
    assert metric(at, "layers reduced") != "0 of 30"
    charts = at.get("plotly_chart")
    assert len(charts) == 2
    import json
    for c in charts:  # presentation-ready like every page's figures (test_app_pages)
        title = json.loads(c.proto.spec)["layout"]["title"]
        assert title["text"] and title["subtitle"]["text"] and "new text" not in c.proto.spec.lower()
    assert '"freed by host swap"' in charts[0].proto.spec
    at.button(key="savers-measure").click().run()
    s = Store(path)
    job = s.job(at.session_state["savers-job"])
    s.close()
    argv = list(job.argv)
    assert argv[0] == "measure" and "--press" in argv and argv[argv.index("--balance") + 1] == "13,3,1,13"
    assert argv.count("--capacity") == 1 and argv[argv.index("--capacity") + 1] == str(cap)
    import json
    plan = plan_from_json(json.loads(Path(argv[argv.index("--press") + 1]).read_text()))
    assert plan.balance == (13, 3, 1, 13) and plan.capacity_bytes == cap


def test_without_press_statistics_names_the_command(stored):
    at = page(profile="bundled:vgg11-h512-b8-cpu4.profile.json")
    assert any("--press" in c.value and "python -m mcap profile" in c.value for c in at.code)
    assert not any("python -m" in i.value for i in at.info)  # prose has no command


def test_bad_input_is_named(stored):
    _, ref = stored
    at = page(profile=ref, balance="13,3,1,13")
    at.text_input(key="savers-balance").set_value("13,3,1,12").run()
    assert any("13,3,1,12" in e.value or "29" in e.value for e in at.error), [e.value for e in at.error]
    at.text_input(key="savers-balance").set_value("13,3,1,13").run()
    at.number_input(key="savers-capacity").set_value(10.0).run()
    assert any("smallest capacity that can be met" in e.value for e in at.error)


def test_plans_from_a_measured_keep_all_run_when_the_store_has_one(stored):
    """A keep-all run of the partitioning in the store (a page job, same model, setup and
    machine) is what the page plans from, as ``press --measure-base`` does; without one
    the page offers to measure it."""
    from mcap.core.types import Run
    path, ref = stored
    at = page(profile=ref, balance="13,3,1,13")
    assert at.button(key="savers-measure-base") is not None
    assert "Before: predicted" in " ".join(c.value for c in at.caption)
    prof = press_profile()
    measured = (TOP - 2**20, TOP - 3 * 2**20, TOP - 3 * 2**20, TOP - 2 * 2**20)
    s = Store(path)
    s.record_run(s.study(prof.model, prof.setup),
                 Run((13, 3, 1, 13), "ok", measured, 1.0), kind="measure", machine=prof.machine)
    s.close()
    at = page(profile=ref, balance="13,3,1,13")
    assert at.checkbox(key="savers-measured").value
    assert metric(at, "peak before") == f"{max(measured) / 2**20:.2f} MiB"
    assert "Before: measured now" in " ".join(c.value for c in at.caption)
    at.checkbox(key="savers-measured").uncheck().run()
    assert metric(at, "peak before") == f"{TOP / 2**20:.2f} MiB"


def test_bundled_press_profile_opens_on_mcaps_pick_without_an_error(tmp_store):
    """mCAP's pick of the bundled press profile (16,10,1,3) has a fullest device no plan
    lowers (least capacity == keep-all peak). The capacity input used to start at that peak
    rounded to the nearest 0.01 MiB, 2,622 bytes below it, so the page's default view was
    "no plan fits". Rounded up, it fits; a capacity below the least says so in MiB."""
    from mcap.app.press import capacity_input_mib
    from mcap.core.press import problem, smallest_capacity
    from mcap.io import datasets
    name = "bundled:vgg11-b8-never-cpu4-press.profile.json"
    at = page(profile=name)
    assert not at.error, [e.value for e in at.error]
    # no plan lowers this pick: the page says so instead of opening on a plan that does
    # nothing (issue 26, Memory savers)
    assert any("No plan lowers 16-10-1-3's peak" in i.value and "parameter state" in i.value
               for i in at.info), [i.value for i in at.info]
    prof = datasets.load(datasets.parse_ref(name))
    balance = tuple(int(x) for x in at.text_input(key="savers-balance").value.split(","))
    least = smallest_capacity(problem(prof, balance))
    assert at.number_input(key="savers-capacity").value * 2**20 >= least
    assert capacity_input_mib(least) * 2**20 - least < 2**20 / 100
    at.number_input(key="savers-capacity").set_value(capacity_input_mib(least) - 0.01).run()
    assert any(f"at least {capacity_input_mib(least):.2f} MiB" in e.value for e in at.error), \
        [e.value for e in at.error]
    # the teaching page's plan section starts from the same capacity (one shared value)
    at.number_input(key="savers-capacity").set_value(capacity_input_mib(least)).run()
    assert not at.error and at.query_params["plan_capacity"] == str(capacity_input_mib(least))
    from tests.conftest import warm_orders
    warm_orders()
    at.switch_page("pages/explained.py").run()
    at.text_input(key="tl-balance").set_value(",".join(map(str, balance))).run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert at.number_input(key="tl-press-capacity").value == capacity_input_mib(least)
