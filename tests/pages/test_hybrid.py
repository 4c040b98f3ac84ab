"""AppTest of the Hybrid plans page (issue 15, Deliver 7) and the Profile page's CAPTURE
options: the plan, peaks and tables shown are the ones ``mcap.core.capture.predict`` computes;
a bad typed plan is an st.error naming the numbers; a profile without dp/tp statistics says
how to get them; the measure button starts ``measure --plan`` as a dashboard job.

The profile is the bundled GPT profile with constructed variants (dp/tp at its batch size,
pp at a quarter and a half of it: its own statistics scaled), written to a data folder of
the test's own (``MCAP_DATA_DIR``)."""
from __future__ import annotations

import dataclasses
import itertools

import pytest
from streamlit.testing.v1 import AppTest

from mcap.core.capture.plan import parse_mesh
from mcap.core.capture.predict import HybridCosts, batch_fit, recommend_mesh
from mcap.core.types import LayerStats, VariantStats
from mcap.figures._style import fmt_bytes
from mcap.io import datasets, jsonio
from tests.conftest import APP

pytestmark = pytest.mark.app
GPT = "gpt-l8-h256-cpu4.profile.json"


def scaled(s: LayerStats, f: float) -> LayerStats:
    return LayerStats(tuple(int(f * x) for x in s.mem_isolated),
                      (None,) + tuple(int(f * x) for x in s.mem_added[1:]))


@pytest.fixture
def data(tmp_path, monkeypatch, tmp_store):
    base = datasets.load(datasets.parse_ref(f"bundled:{GPT}"))
    b = base.setup.batch_size
    variants = (VariantStats(b, scaled(base.stats, 0.7), "dp", 2),
                VariantStats(b, scaled(base.stats, 0.55), "dp", 4),
                VariantStats(b, scaled(base.stats, 0.6), "tp", 2),
                VariantStats(b, scaled(base.stats, 0.45), "tp", 4),
                VariantStats(b // 4, scaled(base.stats, 0.4), "pp", 1),
                VariantStats(b // 2, scaled(base.stats, 0.6), "pp", 1))
    folder = tmp_path / "data"
    folder.mkdir()
    hybrid = dataclasses.replace(base, variants=variants,  # dp/tp beside pp: all from hybrid
                                 setup=dataclasses.replace(base.setup, engine="hybrid"))
    jsonio.save(hybrid, folder / "hybrid.profile.json")
    jsonio.save(base, folder / "plain.profile.json")
    monkeypatch.setenv("MCAP_DATA_DIR", str(folder))
    return hybrid, base


def page(name, **params) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = str(v)
    at.run()
    at.switch_page(f"pages/{name}.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def metric(at, label):
    return next(m.value for m in at.metric if m.label == label)


def test_hybrid_page_shows_the_recommended_plan_and_a_typed_one(data):
    hybrid, _ = data
    at = page("hybrid", profile="bundled:hybrid.profile.json", mesh="2x4")
    rec = recommend_mesh(hybrid, parse_mesh("2x4"))
    assert metric(at, "recommended plan") == rec.plan.text
    assert metric(at, "its predicted peak") == fmt_bytes(rec.peak)
    table = next(d.value for d in at.dataframe if "stage" in d.value.columns)
    assert len(table) == 8 and list(table["node"]) == [0] * 4 + [1] * 4
    assert [round(v, 2) for v in table.iloc[:, list(table.columns).index(
        next(c for c in table.columns if c.startswith("predicted")))]] == \
        [round(p / 2**20, 2) for p in rec.peaks]
    assert not at.error
    # a typed plan: its own per-device peaks
    key = next(t.key for t in at.text_input if t.label == "Your plan")
    at.text_input(key=key).input("2,2,2:tp2,1,2:dp2,1").run()
    assert metric(at, "shown plan") == "2,2,2:tp2,1,2:dp2,1"
    want = HybridCosts(hybrid).peaks(hybrid_plan("2,2,2:tp2,1,2:dp2,1"))
    assert metric(at, "shown plan's predicted peak") == fmt_bytes(max(want))
    # a plan that does not fit: an st.error naming the numbers, never a traceback
    at.text_input(key=key).input("2,2,2:tp4,2,2").run()
    assert not at.exception
    assert any("stage 2 (4 devices) would span nodes 0 and 1" in e.value for e in at.error)
    at.text_input(key=key).input("3,3,3").run()
    assert any("places 9 layers but the model has 10" in e.value for e in at.error)
    # the batch-size line of a stage: the two profiled sizes and the target
    fit = batch_fit(hybrid, 0, rec.plan.stages[0].layers - 1)
    line = next(d.value for d in at.dataframe if "batch size" in d.value.columns)
    assert list(line["batch size"]) == [*fit.sizes, fit.target]


def hybrid_plan(text):
    from mcap.core.capture.plan import parse_plan
    return parse_plan(text)


def test_measure_button_starts_measure_plan_job(data):
    at = page("hybrid", profile="bundled:hybrid.profile.json", mesh="1x4")
    plan = metric(at, "shown plan")
    at.button(key="hybrid-measure").click().run()
    assert not at.exception
    from mcap.app import jobs
    from mcap.store import default_store_path, open_store
    store = open_store(str(default_store_path()))
    job = store.list_jobs()[0]
    jobs.cancel(store, job.id)  # the command line is what is tested here, not a real run
    assert job.kind == "measure" and job.argv[job.argv.index("--plan") + 1] == plan
    assert "--json" in job.argv and job.argv[job.argv.index("--batch-size") + 1] == "8"
    assert any(f"measures plan {plan}" in c.value for c in at.caption)


def test_a_finished_measure_jobs_peaks_become_the_measured_column():
    from mcap.app.capture import plan_result
    log = 'starting\n{"status": "ok", "peaks": [1, 2, 3, 4], "peak": 4}\n'
    assert plan_result(log) == {"status": "ok", "peaks": [1, 2, 3, 4], "peak": 4}
    assert plan_result('{"status": "ok", "peaks": [1, 2') is None and plan_result("") is None


def test_without_dp_tp_the_page_says_how_and_shows_pipeline_plans(data):
    _, base = data
    at = page("hybrid", profile="bundled:plain.profile.json", mesh="2x2")
    # the command in a code block to copy, not in the prose (issue 40 item 12)
    assert any("--parallel dp,tp" in c.value for c in at.code)
    assert not any("--" in i.value for i in at.info)
    rec = recommend_mesh(base, parse_mesh("2x2"))
    assert metric(at, "recommended plan") == rec.plan.text and rec.plan.pipeline_only
    assert any("CAPTURE's batch sizes" in c.value for c in at.caption)


def test_profile_page_adds_the_capture_flags(data):
    at = page("profile")
    # a user model's job waits for confirmation, so the command can be read without running it
    at.text_input(key="profile-spec").set_value("mymodels:build")
    at.checkbox(key="profile-capture").check()
    at.button(key="profile-start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "--capture" in at.session_state["profile-confirm"][2]
    at.checkbox(key="profile-parallel").check()
    at.button(key="profile-start").click().run()  # both: dp/tp runs at each batch size
    assert not at.exception and not at.error, [e.value for e in at.error]
    both = at.session_state["profile-confirm"][2]
    assert "--capture" in both and both[both.index("--parallel") + 1] == "dp,tp"
    from mcap.cli.main import build_parser
    parsed = build_parser().parse_args(["profile", *both])
    assert parsed.capture and parsed.parallel and parsed.engine == "hybrid"
    at.checkbox(key="profile-capture").uncheck()
    at.button(key="profile-start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    args = at.session_state["profile-confirm"][2]
    assert args[args.index("--parallel") + 1] == "dp,tp" and "--capture" not in args
    assert args[args.index("--engine") + 1] == "hybrid"  # what profile --parallel runs on
    parsed = build_parser().parse_args(["profile", *args])  # the job's own command line
    assert parsed.engine == "hybrid" and parsed.parallel
    at.selectbox(key="profile-command").set_value("sweep")
    at.button(key="profile-start").click().run()
    assert any("CAPTURE options add profiling runs" in e.value for e in at.error)


def test_the_measured_peaks_of_a_finished_job_are_drawn_beside_the_prediction(data):
    from mcap.app import jobs
    from mcap.store import default_store_path, open_store
    hybrid, _ = data
    at = page("hybrid", profile="bundled:hybrid.profile.json", mesh="1x4")
    plan = metric(at, "shown plan")
    store = open_store(str(default_store_path()))
    job_id = store.create_job("measure", ["measure", "--plan", plan], 1)
    store.update_job(job_id, status="done", done=1)
    log = jobs.log_path(store, job_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    # what measure --plan --json prints (a breakdown per device makes the line long)
    log.write_text('{"status": "ok", "peaks": [%d, %d, %d, %d], "peak": 4, "breakdown": [%s]}\n'
                   % (2**20, 2 * 2**20, 3 * 2**20, 4 * 2**20,
                      ", ".join(['{"weights": 5321728, "other": 4217152}'] * 80)))
    at.session_state["hybrid-job"] = (job_id, plan)
    at.run()
    assert not at.exception
    table = next(d.value for d in at.dataframe if "stage" in d.value.columns)
    col = next(c for c in table.columns if c.startswith("measured"))
    assert [float(v) for v in table[col]] == [1.0, 2.0, 3.0, 4.0]
    assert any("Measured peak 4.00 MiB" in s.value for s in at.success)


def test_a_shared_url_reopens_the_typed_plan_and_a_stale_one_falls_back(data):
    at = page("hybrid", profile="bundled:hybrid.profile.json", mesh="2x4",
              plan="2,2,2:tp2,1,2:dp2,1")
    assert metric(at, "shown plan") == "2,2,2:tp2,1,2:dp2,1"
    at = page("hybrid", profile="bundled:hybrid.profile.json", mesh="1x4",
              plan="2,2,2:tp2,1,2:dp2,1")  # 8 devices on a 1x4 mesh: the recommendation instead
    assert metric(at, "shown plan") == metric(at, "recommended plan") and not at.error
    # and it says so, once, naming the key and why (issue 38 item 6)
    said = [w.value for w in at.warning if "link's plan=" in w.value]
    assert len(said) == 1 and "recommended plan" in said[0], [w.value for w in at.warning]


def test_the_bundled_dp_tp_profile_searches_real_hybrid_plans(tmp_store):
    """data/gpt-l8-h128-cpu8-dptp.profile.json: made by ``profile --parallel dp,tp`` on
    engine hybrid (data/PROVENANCE.md), so the page searches measured dp and tp stages."""
    name = "gpt-l8-h128-cpu8-dptp.profile.json"
    prof = datasets.load(datasets.parse_ref(f"bundled:{name}"))
    assert {(v.parallel, v.degree) for v in prof.variants} == {
        ("dp", 2), ("dp", 4), ("tp", 2), ("tp", 4)} and prof.setup.engine == "hybrid"
    at = page("hybrid", profile=f"bundled:{name}", mesh="2x4")
    rec = recommend_mesh(prof, parse_mesh("2x4"))
    assert rec.kinds == ("dp", "tp") and not rec.missing
    assert not any("no data- or tensor-parallel" in i.value for i in at.info)
    assert metric(at, "recommended plan") == rec.plan.text
    assert metric(at, "its predicted peak") == fmt_bytes(rec.peak)
    assert not at.error


def test_a_merged_profiles_plans_are_in_real_layers(data, tmp_path):
    """profile --merge-to: the page recommends, shows, checks and measures plans over the
    model's real layers (recommend_mesh maps them back), never over the merged ones."""
    from mcap.core.capture import merging
    from mcap.core.capture.plan import parse_plan
    _, base = data
    b = base.setup.batch_size
    scaled_base = dataclasses.replace(base, variants=(
        VariantStats(b // 4, scaled(base.stats, 0.4), "pp", 1),
        VariantStats(b // 2, scaled(base.stats, 0.6), "pp", 1)))
    sizes = merging.merge_sizes(base.stats, 6)
    merged = merging.merge_profile(scaled_base, sizes)
    jsonio.save(merged, tmp_path / "data" / "merged.profile.json")
    at = page("hybrid", profile="bundled:merged.profile.json", mesh="1x4")
    rec = recommend_mesh(merged, parse_mesh("1x4"))
    shown = metric(at, "recommended plan")
    assert shown == rec.plan.text and sum(parse_plan(shown).balance) == base.model.num_layers
    assert not at.error
    # the batch-size line of the first stage, given in real layers
    line = next(d.value for d in at.dataframe if "batch size" in d.value.columns)
    assert list(line["batch size"]) == [b // 4, b // 2, b]
    # a typed plan whose cut falls inside a merged layer: an st.error naming it
    inside = next(c for c in range(1, sum(sizes)) if c not in set(itertools.accumulate(sizes)))
    key = next(t.key for t in at.text_input if t.label == "Your plan")
    rest = base.model.num_layers - inside
    at.text_input(key=key).input(f"{inside},{rest - 2},1,1").run()
    assert any("falls inside a merged layer" in e.value for e in at.error)
    # "measure this plan" measures the real model with the real-layer plan
    at.text_input(key=key).input(shown).run()
    at.button(key="hybrid-measure").click().run()
    assert not at.exception
    from mcap.app import jobs
    from mcap.store import default_store_path, open_store
    store = open_store(str(default_store_path()))
    job = store.list_jobs()[0]
    jobs.cancel(store, job.id)
    assert job.argv[job.argv.index("--plan") + 1] == shown
    assert job.argv[job.argv.index("--model") + 1] == base.model.spec


def test_a_mesh_with_one_device_per_node_does_not_deny_the_profiles_dp_tp(tmp_store):
    """On mesh 1x1 (or 2x1) no stage can be dp or tp, but the bundled dp/tp profile has those
    statistics: the page used to say 'This profile has no data- or tensor-parallel
    statistics' and offer the command that makes them. It now names the mesh as the reason."""
    name = "gpt-l8-h128-cpu8-dptp.profile.json"
    for mesh in ("1x1", "2x1"):
        at = page("hybrid", profile=f"bundled:{name}", mesh=mesh)
        info = " ".join(i.value for i in at.info)
        assert "no data- or tensor-parallel statistics" not in info, info
        assert f"Mesh {mesh} has one device per node" in info
        assert not at.error
    at.text_input(key="hybrid-mesh").set_value("1x4").run()
    assert not any("one device per node" in i.value for i in at.info)


def test_a_pipeline_only_plan_shows_the_measured_peaks_of_the_chosen_sweep(tmp_store):
    """Issue 40, item 2: Hybrid plans showed measured "–" for 16,1,5,8 (VGG11) and 1,6,7,1
    (GPT-2) while Pipeline memory, explained showed them: a pipeline-only plan takes its
    measured peaks from the chosen sweep, as every page does."""
    from mcap.app.searches import measured_for
    for profile_ref, sweep_ref, plan in (
            ("bundled:vgg11-h512-b8-cpu4.profile.json",
             "bundled:vgg11-h512-b8-cpu4-full.sweep.json", "16,1,5,8"),
            ("bundled:gpt2-l12-h256-s256-cpu4.profile.json",
             "bundled:gpt2-l12-h256-s256-cpu4-full.sweep.json", "1,6,7,1")):
        sweep = datasets.load(datasets.parse_ref(sweep_ref))
        run = measured_for(sweep.runs, tuple(int(n) for n in plan.split(",")))
        at = AppTest.from_file(APP, default_timeout=30)
        at.query_params.update(profile=profile_ref, sweep=sweep_ref, mesh="1x4", plan=plan)
        at.switch_page("pages/hybrid.py")
        at.run()
        assert not at.exception
        table = next(d.value for d in at.dataframe if "measured (MiB)" in d.value.columns)
        assert table["measured (MiB)"].tolist() == [round(p / 2**20, 2) for p in run.peaks], \
            (plan, table)
        assert any("pipeline-only" in c.value and sweep_ref.split(":")[1] in c.value
                   for c in at.caption)


def test_pipeline_measured_is_none_for_a_hybrid_plan_or_an_unmeasured_one():
    from mcap.app.capture import pipeline_measured
    from mcap.core.capture.plan import parse_plan
    from mcap.core.types import Run
    profile = datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4.profile.json"))
    runs = (Run(balance=(16, 1, 5, 8), status="ok", peaks=(4, 3, 2, 1), seconds=1.0),
            Run(balance=(15, 2, 5, 8), status="oom", peaks=None, seconds=1.0))
    assert pipeline_measured(profile, parse_plan("16,1,5,8"), runs) == (4, 3, 2, 1)
    assert pipeline_measured(profile, parse_plan("15,2,5,8"), runs) is None
    assert pipeline_measured(profile, parse_plan("14,1,5,8"), runs) is None
    assert pipeline_measured(profile, parse_plan("16:dp2,1,5,8"), runs) is None


def test_profile_page_profiles_any_schedule_in_bf16(data):
    """Issue 39: the Profile page offers every registered schedule, the stages per device
    of the interleaved ones and the precision; the job's command line carries them, and a
    schedule's rule on the micro-batches is refused on the page before any job starts."""
    from mcap.cli.main import build_parser
    at = page("profile")
    at.text_input(key="profile-spec").set_value("mymodels:build")  # waits for confirmation
    at.selectbox(key="profile-schedule").set_value("interleaved-zb")
    at.selectbox(key="profile-precision").set_value("bf16-autocast")
    at.number_input(key="profile-virtual").set_value(2)
    at.number_input(key="profile-stages").set_value(2)
    at.button(key="profile-start").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    args = at.session_state["profile-confirm"][2]
    parsed = build_parser().parse_args(["profile", *args])
    assert (parsed.schedule, parsed.virtual_stages, parsed.precision) == \
        ("interleaved-zb", 2, "bf16-autocast")
    at.selectbox(key="profile-schedule").set_value("dualpipev")
    at.number_input(key="profile-stages").set_value(8)  # DualPipeV needs M >= its stages
    at.button(key="profile-start").click().run()
    assert at.error and not at.exception, [e.value for e in at.error]
