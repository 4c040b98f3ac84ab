import json

import pytest

from mcap.io import jsonio
from mcap.core.errors import SchemaError
from mcap.core.types import (Layer, LayerStats, MemoryBreakdown, ModelInfo, Profile, Run, Setup,
                        Sweep)

MODEL = ModelInfo(spec="vgg11:image_size=32",
                  layers=(Layer("features.0", 7168), Layer("features.1", 0), Layer("classifier", 40)))
SETUP = Setup(stages=2, capacity_bytes=None, engine="torchgpipe", optimizer="adam")
RUNS = (Run(balance=(1, 2), status="ok", peaks=(100, 200), seconds=1.5, samples_per_second=12.0,
            breakdown=(MemoryBreakdown(1, 2, 3, 4), MemoryBreakdown(5, 6, 7, 8))),
        Run(balance=(2, 1), status="oom", peaks=None, seconds=0.2, error="stage 0 exceeded 1000 bytes"))
PROFILE = Profile(model=MODEL, setup=SETUP,
                  stats=LayerStats(mem_isolated=(100, 120, 90), mem_added=(None, -5, 30)), runs=RUNS)


def test_profile_shape_matches_issue():
    d = jsonio.profile_to_dict(PROFILE)
    assert d["schema"] == "mcap.profile/1"
    assert set(d) == {"schema", "model", "setup", "mem_isolated", "mem_added", "runs"}
    assert d["model"] == {"spec": "vgg11:image_size=32", "layers": [
        {"name": "features.0", "param_bytes": 7168}, {"name": "features.1", "param_bytes": 0},
        {"name": "classifier", "param_bytes": 40}]}
    assert d["setup"] == {"stages": 2, "batch_size": 32, "chunks": 4, "schedule": "gpipe",
                          "checkpoint": "except_last", "device": "cpu", "capacity_bytes": None,
                          "engine": "torchgpipe", "optimizer": "adam", "threads": 1}
    assert d["mem_added"][0] is None
    assert d["runs"][1] == {"balance": [2, 1], "status": "oom", "peaks": None, "seconds": 0.2,
                            "samples_per_second": None, "error": "stage 0 exceeded 1000 bytes",
                            "breakdown": None}
    assert d["runs"][0]["breakdown"][1] == {"weights": 5, "gradients": 6, "optimizer": 7, "other": 8}
    json.dumps(d)  # plain JSON types only


def test_round_trip_through_file_keeps_everything(tmp_path):
    path = tmp_path / "sub" / "p.json"
    jsonio.save(PROFILE, path)
    back = jsonio.load_profile(path)
    assert back == PROFILE
    assert jsonio.load_any(path) == PROFILE
    sweep = Sweep(model=MODEL, setup=SETUP, runs=RUNS)
    jsonio.save(sweep, tmp_path / "s.json")
    assert jsonio.load_sweep(tmp_path / "s.json") == sweep
    assert isinstance(jsonio.load_any(tmp_path / "s.json"), Sweep)
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["p.json"]  # no temp left over


def test_extra_keys_are_preserved(tmp_path):
    d = jsonio.profile_to_dict(PROFILE)
    d["note"] = {"who": "lab"}
    d["setup"]["gpu"] = "titan"  # unknown setup keys are tolerated
    p = tmp_path / "x.json"
    p.write_text(json.dumps(d))
    prof = jsonio.load_profile(p)
    assert prof.extra == {"note": {"who": "lab"}}
    assert jsonio.profile_to_dict(prof)["note"] == {"who": "lab"}


def test_minimal_setup_defaults():
    d = jsonio.profile_to_dict(PROFILE)
    d["setup"] = {"stages": 2}
    assert jsonio.profile_from_dict(d).setup == Setup(stages=2)


@pytest.mark.parametrize("text,needle", [
    ('{"schema": "mcap.profile/2"}', "expected schema 'mcap.profile/1', found 'mcap.profile/2'"),
    ('{"schema": "mcap.sweep/1", "model": {}}', "found 'mcap.sweep/1'"),
    ('{"schema": "mcap.profile/1", "model": {"spec": "x", "layers": [', "not valid JSON (truncated?)"),
    ('', "empty"),
    ('[1, 2]', "expected a JSON object"),
])
def test_schema_errors_name_file_and_found(tmp_path, text, needle):
    p = tmp_path / "bad.json"
    p.write_text(text)
    with pytest.raises(SchemaError) as exc:
        jsonio.load_profile(p)
    assert str(p) in str(exc.value) and needle in str(exc.value)


def test_missing_file(tmp_path):
    with pytest.raises(SchemaError, match="no such file"):
        jsonio.load_any(tmp_path / "nope.json")


def test_load_any_rejects_foreign_schema(tmp_path):
    p = tmp_path / "f.json"
    p.write_text('{"schema": "other/1"}')
    with pytest.raises(SchemaError, match="found 'other/1'"):
        jsonio.load_any(p)


@pytest.mark.parametrize("mutate,needle", [
    (lambda d: d["mem_isolated"].pop(), "3 layers but mem_isolated has 2"),
    (lambda d: d["mem_added"].__setitem__(0, 5), "mem_added[0]"),
    (lambda d: d["mem_isolated"].__setitem__(1, "big"), "mem_isolated[1]: expected an integer, found \"big\""),
    (lambda d: d["runs"][0].__setitem__("balance", [1, 1]), "not a partitioning of 3 layers"),
    (lambda d: d["runs"][0].__setitem__("status", "great"), "runs[0].status"),
    (lambda d: d["runs"][0].__setitem__("peaks", [1]), "1 peaks for 2 stages"),
    (lambda d: d["model"].pop("layers"), "missing key 'layers'"),
])
def test_bad_fields_are_named(mutate, needle):
    d = jsonio.profile_to_dict(PROFILE)
    mutate(d)
    with pytest.raises(SchemaError) as exc:
        jsonio.profile_from_dict(d, "p.json")
    assert needle in str(exc.value) and "p.json" in str(exc.value)


def test_save_failure_leaves_old_file_intact(tmp_path):
    p = tmp_path / "p.json"
    jsonio.save(PROFILE, p)
    before = p.read_text()
    bad = Profile(model=MODEL, setup=SETUP, stats=PROFILE.stats, runs=RUNS, extra={"x": object()})
    with pytest.raises(TypeError):
        jsonio.save(bad, p)
    assert p.read_text() == before
    assert sorted(x.name for x in tmp_path.iterdir()) == ["p.json"]
