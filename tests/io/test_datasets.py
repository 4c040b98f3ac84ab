"""mcap.io.datasets: what the Overview page lists and opens, and how bad uploads fail."""
import pytest

from mcap.io import datasets
from mcap.io import jsonio
from mcap.core.errors import McapError, SchemaError
from mcap.store import open_store
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Run, Setup, Sweep

MODEL = ModelInfo("toy", (Layer("a", 10), Layer("b", 20), Layer("c", 30)))
SETUP = Setup(stages=2)
PROFILE = Profile(MODEL, SETUP, LayerStats((100, 200, 300), (None, 5, 7)),
                  (Run((1, 2), "ok", (100, 212), 1.0, 5.0),))
SWEEP = Sweep(MODEL, SETUP, (Run((1, 2), "ok", (100, 212), 1.0, 5.0), Run((2, 1), "oom", None, 1.0)))


def test_bundled_lists_profiles_then_sweeps(tmp_path):
    jsonio.save(SWEEP, tmp_path / "a.sweep.json")
    jsonio.save(PROFILE, tmp_path / "z.profile.json")
    (tmp_path / "notes.txt").write_text("x")
    refs = datasets.bundled(tmp_path)
    assert [(r.kind, r.key) for r in refs] == [("profile", "z.profile.json"), ("sweep", "a.sweep.json")]
    assert datasets.load(refs[0], data_dir=tmp_path) == PROFILE
    assert datasets.load(refs[1], data_dir=tmp_path) == SWEEP
    assert datasets.bundled(tmp_path / "missing") == ()


def test_refs_round_trip_through_query_params():
    for ref in (datasets.DatasetRef("bundled", "profile", "v.profile.json"),
                datasets.DatasetRef("store", "sweep", "3"), datasets.DatasetRef("upload", "", "my.json")):
        assert datasets.parse_ref(ref.param) == ref
    with pytest.raises(McapError, match="'store:sweep:x' is not of the form"):
        datasets.parse_ref("store:sweep:x")


def test_bundled_refuses_paths_outside_data(tmp_path):
    with pytest.raises(McapError, match="is not a file in"):
        datasets.load(datasets.DatasetRef("bundled", "profile", "../x.profile.json"), data_dir=tmp_path)
    with pytest.raises(McapError, match="'nope.profile.json' not found"):
        datasets.load(datasets.parse_ref("bundled:nope.profile.json"), data_dir=tmp_path)


def test_a_link_naming_no_possible_file_is_an_error_naming_it(tmp_path):
    """Issue 38, item 6: a NUL in a name raised ValueError from Path.resolve, and a name too
    long for the file system OSError; both are McapErrors now, and nothing is read."""
    with pytest.raises(McapError, match="control character"):
        datasets.parse_ref("bundled:a\x00b.profile.json")
    with pytest.raises(McapError, match="5,008 characters"):
        datasets.parse_ref("bundled:" + "a" * 5000)
    with pytest.raises(McapError, match="File name too long"):
        datasets.load(datasets.DatasetRef("bundled", "", "a" * 290), data_dir=tmp_path)
    with pytest.raises(McapError, match="is not a file in"):
        datasets.load(datasets.DatasetRef("bundled", "", "a\x00b"), data_dir=tmp_path)


def test_store_datasets(tmp_path):
    store = open_store(tmp_path / "s.sqlite")
    pid = store.save_profile(PROFILE, name="mine")
    sid = store.save_sweep(SWEEP)
    refs = datasets.in_store(store)
    assert [r.param for r in refs] == [f"store:profile:{pid}", f"store:sweep:{sid}"]
    assert "mine: toy, 2 stages, 1 run (store #" in refs[0].label
    # two profiles of one name and model are told apart (issue 26, Polish)
    again = store.save_profile(PROFILE, name="mine")
    labels = [r.label for r in datasets.in_store(store) if r.kind == "profile"]
    assert len(set(labels)) == 2 and f"#{again}" in labels[0]
    assert datasets.load(refs[1], store) == SWEEP
    with pytest.raises(McapError, match="needs the store"):
        datasets.load(refs[0], None)


def test_upload_round_trip_and_bad_files():
    assert datasets.load_upload("p.json", jsonio.dumps(PROFILE).encode()) == PROFILE
    with pytest.raises(SchemaError, match="'e.json' is empty"):
        datasets.load_upload("e.json", b"")
    with pytest.raises(SchemaError, match=r"'t.json': not valid JSON"):
        datasets.load_upload("t.json", jsonio.dumps(PROFILE).encode()[:50])
    with pytest.raises(SchemaError, match="'o.json': expected schema 'mcap.profile/1' or 'mcap.sweep/1', found 'other/2'"):
        datasets.load_upload("o.json", b'{"schema": "other/2"}')


def test_file_revision_changes_with_content(tmp_path):
    path = tmp_path / "f.json"
    assert datasets.file_revision(path) == (None, None)
    path.write_text("a")
    first = datasets.file_revision(path)
    path.write_text("abc")
    assert datasets.file_revision(path) != first
