"""Every "choose one of N" is a registry: a toy of each kind, registered here and nowhere
else, appears in the CLI's choices, runs through the one entry, carries its chart colour,
and shows on a page (ARCHITECTURE.md, "Registries": adding one is one file plus its import).
"""
from __future__ import annotations

import json
from contextlib import contextmanager

import pytest

from mcap.cli.main import build_parser, main
from tests.conftest import APP, DATA

PROFILE = DATA / "vgg11-cpu4.profile.json"
HYBRID = DATA / "gpt-l8-h128-cpu8-dptp.profile.json"
PRESS = DATA / "vgg11-b8-never-cpu4-press.profile.json"


@contextmanager
def registered(registry, cls):
    """``cls`` in ``registry`` for the duration (a toy never outlives its test)."""
    registry.register(cls)
    try:
        yield registry.get(cls.name)
    finally:
        registry.unregister(cls.name)


def choices(command: str, option: str) -> tuple:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return tuple(next(a for a in sub._actions if option in a.option_strings).choices)


# --- search methods ---------------------------------------------------------------------

def _toy_method():
    from mcap.core.search.base import Found, Method
    from mcap.core.search.uniform import uniform

    class Toy(Method):
        name, label, help, color = "toy", "toy (reversed uniform)", "a toy method", "#123456"

        def search(self, costs, stages, context, *, band=None, progress=None, **options):
            return Found(tuple(reversed(uniform(costs.num_layers, stages))), 1)
    return Toy


def test_a_toy_search_method_is_offered_run_and_drawn(capsys):
    from mcap.app.searches import quick_methods
    from mcap.core import search
    from mcap.figures._style import method_color
    with registered(search.REGISTRY, _toy_method()):
        assert "toy" in choices("recommend", "--method")
        assert "toy" in quick_methods()  # the pages' selectors and comparison tables
        assert method_color("toy") == "#123456"
        assert main(["recommend", "--profile", str(PROFILE), "--stages", "4", "--method",
                     "toy", "--json"]) == 0
        got = json.loads(capsys.readouterr().out)
        assert got["method"] == "toy" and got["balance"] == [7, 7, 8, 8]
    assert "toy" not in choices("recommend", "--method")


def test_a_toy_baseline_is_a_scale_partitioner():
    from mcap.core import search
    toy = _toy_method()
    toy.uses_costs = False
    with registered(search.REGISTRY, toy):
        assert "toy" in choices("scale", "--partitioner")


@pytest.mark.app
def test_a_toy_search_method_shows_on_the_recommend_page(tmp_store):
    from streamlit.testing.v1 import AppTest

    from mcap.core import search
    with registered(search.REGISTRY, _toy_method()):
        at = AppTest.from_file(APP,
                               default_timeout=30)
        at.run()
        at.switch_page("pages/recommend.py")
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        assert "toy (reversed uniform)" in at.selectbox(key="rec-method").options
        table = next(d.value for d in at.dataframe if "method" in d.value.columns)
        assert "toy (reversed uniform)" in table["method"].tolist()  # its label, as every method


# --- predictors -------------------------------------------------------------------------

def test_a_toy_predictor_is_offered_and_predicts(capsys):
    from mcap.core.costs import AdditiveCosts
    from mcap.core.predict import cost_table
    from mcap.core.predictors.base import REGISTRY, Predictor

    class Toy(Predictor):
        name, label, help = "toy", "toy (Listing 1.1 again)", "a toy predictor"

        def fit(self, profile):
            return AdditiveCosts(cost_table(profile.stats), self.name)

    with registered(REGISTRY, Toy):
        assert "toy" in choices("predict", "--predictor")
        assert main(["predict", "--profile", str(PROFILE), "--balance", "3,3,5,19",
                     "--predictor", "toy", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["predicted_peak"] > 0


# --- engines ----------------------------------------------------------------------------

def test_a_toy_engine_is_offered_with_its_capabilities():
    from mcap.runner import engines
    from mcap.runner.engines.base import Engine

    class Toy(Engine):
        name, label, help = "toy", "toy engine", "a toy engine"
        devices = ("cpu",)

        def processes(self, setup):
            return setup.stages

    with registered(engines.REGISTRY, Toy):
        assert "toy" in choices("measure", "--engine")
        assert "toy" not in engines.across_nodes()  # a flag, not a name, says so
        assert engines.plans_engine() == "hybrid"


# --- mesh searches (CAPTURE) ----------------------------------------------------------------

def test_a_toy_mesh_search_is_offered_and_searches(capsys):
    from mcap.core.capture import meshsearch

    class Toy(meshsearch.MeshMethod):
        name, label, help, color = "toymesh", "toy mesh", "the DP under another name", "#654321"

        def search(self, L, mesh, cost, *, prune=True, kinds=("dp", "tp"), only=None):
            return meshsearch.exact_plan(L, mesh, cost, kinds=kinds, only=only)

    with registered(meshsearch.REGISTRY, Toy):
        assert "toymesh" in choices("recommend", "--method")
        assert main(["recommend", "--profile", str(HYBRID), "--mesh", "2x4", "--method",
                     "toymesh", "--json"]) == 0
        toy = json.loads(capsys.readouterr().out)
        assert main(["recommend", "--profile", str(HYBRID), "--mesh", "2x4", "--json"]) == 0
        exact = json.loads(capsys.readouterr().out)
        assert toy["plan_text"] == exact["plan_text"] and toy["method"] == "toymesh"
        from mcap.figures._style import method_color
        assert method_color("toymesh") == "#654321"


# --- MPress planners ---------------------------------------------------------------------

def test_a_toy_press_planner_is_offered_and_plans(capsys):
    from mcap.core.press import base, mpress

    class Toy(base.Planner):
        name, label, help, color = "toyplan", "toy planner", "MPress's search again", "#abcdef"

        def plan(self, p, capacity):
            return mpress.plan(p, capacity)

    with registered(base.REGISTRY, Toy):
        assert "toyplan" in choices("press", "--method")
        assert "toyplan" in choices("recommend", "--press-method")
        from mcap.core.search.uniform import uniform
        from mcap.io.jsonio import load_profile
        profile = load_profile(PRESS)
        balance = ",".join(map(str, uniform(profile.model.num_layers, profile.setup.stages)))
        assert main(["press", "--profile", str(PRESS), "--balance", balance, "--capacity",
                     "1PiB", "--method", "toyplan", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["method"] == "toyplan"
