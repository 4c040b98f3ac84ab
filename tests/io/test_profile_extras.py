"""A profile's CAPTURE variants and MPress statistics survive the file and the store, and a
file that says something impossible about them is refused naming the key."""
import dataclasses
import json

import pytest

from mcap.core.errors import SchemaError
from mcap.core.types import LayerStats, PressStats, Run, VariantStats
from mcap.io import jsonio
from mcap.store import Store

DATA = "data/vgg11-h512-b8-cpu4.profile.json"


def _profile():
    p = jsonio.load_profile(DATA)
    n = p.model.num_layers
    v = VariantStats(4, LayerStats(p.stats.mem_isolated, p.stats.mem_added), "dp", 2,
                     (Run(balance=(n - 1, 1), status="ok", peaks=(10, 20, 30), seconds=1.5),))
    w = VariantStats(2, LayerStats(p.stats.mem_isolated, p.stats.mem_added))
    press = PressStats(tuple(range(n)), tuple(0.25 for _ in range(n)), 1.5e9, 3e9)
    return dataclasses.replace(p, variants=(v, w), press=press)


def test_round_trip_file_and_store(tmp_path):
    q = _profile()
    jsonio.save(q, tmp_path / "x.profile.json")
    r = jsonio.load_profile(tmp_path / "x.profile.json")
    assert r.variants == q.variants and r.press == q.press
    assert r.variant(4, "dp", 2).runs[0].peaks == (10, 20, 30)
    assert r.variant(8) is None
    with Store(tmp_path / "s.db") as s:
        t = s.load_profile(s.save_profile(q))
    assert t.variants == q.variants and t.press == q.press and t.extra == q.extra


def test_older_files_have_none():
    p = jsonio.load_profile(DATA)
    assert p.variants == () and p.press is None


@pytest.mark.parametrize("patch, words", [
    (lambda d: d["variants"][0].update(parallel="pp"), "pp has degree 1"),
    (lambda d: d["variants"][0].update(parallel="__import__('os')"), "expected one of"),
    (lambda d: d["variants"][0].update(batch_size=-3), "variants[0].batch_size"),
    (lambda d: d["variants"][0]["mem_isolated"].pop(), "one per layer"),
    (lambda d: d["variants"].append(dict(d["variants"][0])), "appears twice"),
    (lambda d: d["press"].update(host_bandwidth="fast"), "press.host_bandwidth"),
    (lambda d: d["press"]["saved_bytes"].__setitem__(0, -1), "press.saved_bytes[0]"),
])
def test_bad_values_are_refused(tmp_path, patch, words):
    d = jsonio.to_dict(_profile())
    patch(d)
    path = tmp_path / "bad.profile.json"
    path.write_text(json.dumps(d))
    with pytest.raises(SchemaError, match=words.replace("[", r"\[").replace("(", r"\(")):
        jsonio.load_profile(path)


def test_press_plan_round_trip_and_refusals():
    from mcap.core.errors import McapError
    from mcap.core.press.actions import LayerAction, keep_all, plan_from_json, plan_to_json
    plan = keep_all("vgg11:image_size=32", (2, 3))
    stages = (plan.stages[0], (LayerAction(2, "d2d", 0), LayerAction(3, "recompute"),
                               LayerAction(4, "swap")))
    plan = dataclasses.replace(plan, stages=stages, predicted_peaks=(5, 6))
    d = plan_to_json(plan)
    assert plan_from_json(json.loads(json.dumps(d))) == plan
    assert plan.counts() == {"keep": 2, "recompute": 1, "swap": 1, "d2d": 1}
    bad = json.loads(json.dumps(d))
    bad["plan"][1][0]["target"] = 1
    with pytest.raises(McapError, match="target 1 is the layer's own stage"):
        plan_from_json(bad)
    bad = json.loads(json.dumps(d))
    bad["plan"][1][1]["layer"] = 7
    with pytest.raises(McapError, match="must be layer 3, found 7"):
        plan_from_json(bad)
    bad = json.loads(json.dumps(d))
    bad["plan"][0][0]["action"] = "exec"
    with pytest.raises(McapError, match="expected one of keep"):
        plan_from_json(bad)


def test_the_gpus_a_cuda_press_profile_ran_on_survive_and_are_checked(tmp_path):
    q = _profile()
    q = dataclasses.replace(q, press=dataclasses.replace(q.press, gpus=1))
    jsonio.save(q, tmp_path / "x.profile.json")
    assert jsonio.load_profile(tmp_path / "x.profile.json").press.gpus == 1
    with Store(tmp_path / "s.db") as s:
        assert s.load_profile(s.save_profile(q)).press.gpus == 1
    d = jsonio.to_dict(q)
    d["press"]["gpus"] = 0
    (tmp_path / "bad.profile.json").write_text(json.dumps(d))
    with pytest.raises(SchemaError, match=r"press\.gpus"):
        jsonio.load_profile(tmp_path / "bad.profile.json")
