"""Outputs never destroy data (issue 12, critical 2): ``--out`` is checked before any run,
written atomically after the store has the result, and a failed write names the command
that writes it again from the store."""
from __future__ import annotations

import errno
import json

import pytest

from mcap.cli.main import main
from mcap.io import jsonio, outputs
from tests.conftest import DATA

TINY = "gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8"


def cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    return code, out, err


@pytest.fixture
def store(tmp_path):
    """An existing store with one profile in it (the data --out must never destroy)."""
    from mcap.store import Store
    path = tmp_path / "store.sqlite"
    with Store(path) as s:
        s.save_profile(jsonio.load_profile(DATA / "vgg11-cpu4.profile.json"))
    return path


def _bad_outs(tmp_path, store):
    folder = tmp_path / "folder"
    folder.mkdir()
    (tmp_path / "notes.txt").write_text("my notes")
    (tmp_path / "a.sweep.json").write_text((DATA / "vgg11-cpu4-sample300.sweep.json").read_text())
    (tmp_path / "afile").write_text("x")
    return [(store, "is the results store"), (f"{store}-wal", "results store wal"),
            (f"{store}-shm", "results store shm"), (folder, "is a folder"),
            (tmp_path / "notes.txt", "not an mcap JSON file"),
            (tmp_path / "a.sweep.json", "schema 'mcap.sweep/1'"),
            (tmp_path / "afile" / "out.json", "is a file, not a folder")]


@pytest.mark.parametrize("command", ["profile", "sweep", "scale"])
def test_bad_out_exits_2_before_any_run(capsys, tmp_path, store, command):
    before = store.read_bytes()
    extra = {"profile": [], "sweep": ["--sample", "2"],
             "scale": ["--vary", "hidden", "--low", "16", "--high", "32", "--capacity", "1GiB"]}[command]
    for out, needle in _bad_outs(tmp_path, store):
        if command == "sweep" and "mcap.sweep/1" in needle:
            continue  # same schema: replacing it is allowed (documented)
        code, _, err = cli(capsys, command, "--model", TINY, "--stages", "2", "--store", store,
                           "--out", out, *extra)
        assert code == 2 and str(out) in err, (out, err)
        assert needle.split()[-1] in err, (needle, err)
    assert store.read_bytes() == before  # nothing measured, nothing written


def test_overwriting_a_file_of_the_same_schema_is_allowed(tmp_path):
    out = tmp_path / "old.profile.json"
    out.write_text((DATA / "vgg11-cpu4.profile.json").read_text())
    assert outputs.check_out(out, "mcap.profile/1") == out
    assert outputs.check_out(tmp_path / "new" / "x.json", "mcap.profile/1")
    assert not (tmp_path / "new").exists()  # the check creates nothing


def test_write_text_is_atomic(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    out.write_text("old")

    def fail(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr("os.fsync", fail)
    with pytest.raises(OSError):
        outputs.write_text(out, "new" * 1000)
    assert out.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_scaling_save_is_atomic(tmp_path, monkeypatch):
    from mcap.workflow import scaling
    src = DATA / "amoebanet-d-cpu4.scale.json"
    s = scaling.load(src)
    out = tmp_path / "s.scale.json"
    out.write_text("old")
    monkeypatch.setattr("os.replace", lambda *a: (_ for _ in ()).throw(OSError(errno.EIO, "I/O error")))
    with pytest.raises(OSError):
        scaling.save(s, out)
    assert out.read_text() == "old" and len(list(tmp_path.iterdir())) == 1


@pytest.mark.integration
def test_a_failed_final_write_keeps_the_runs_and_says_how_to_export(capsys, tmp_path, monkeypatch):
    store = tmp_path / "store.sqlite"
    out = tmp_path / "tiny.profile.json"

    def full_disk(path, text):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(outputs, "write_text", full_disk)
    code, _, err = cli(capsys, "profile", "--model", TINY, "--stages", "2", "--batch-size", "4",
                       "--chunks", "2", "--store", store, "--out", out, "--timeout", "120")
    assert code == 2 and "No space left on device" in err and "kept in the store" in err
    command = err.split("write the file again with: ")[1].strip().split()
    assert command[:3] == ["python", "-m", "mcap"] and not out.exists()
    monkeypatch.undo()
    code, printed, err = cli(capsys, *command[3:])
    assert code == 0, err
    profile = jsonio.load_profile(out)
    assert profile.model.spec.startswith("gpt:") and len(profile.runs) >= 3


def test_export_refuses_a_bad_out_and_missing_ids(capsys, tmp_path, store):
    code, _, err = cli(capsys, "export", "--store", store, "--profile", "1", "--out", store)
    assert code == 2 and "results store" in err
    code, _, err = cli(capsys, "export", "--store", store, "--profile", "99", "--out", tmp_path / "x.json")
    assert code == 2 and "has no profile 99" in err
    code, _, err = cli(capsys, "export", "--store", tmp_path / "none.sqlite", "--sweep", "1",
                       "--out", tmp_path / "x.json")
    assert code == 2 and "does not exist" in err
    code, out, _ = cli(capsys, "export", "--store", store, "--profile", "1", "--out", tmp_path / "p.json")
    assert code == 0 and json.loads((tmp_path / "p.json").read_text())["schema"] == "mcap.profile/1"


def test_an_out_in_a_new_folder_is_written_and_a_linked_out_is_refused(tmp_path):
    """``--out out/p.json`` in a fresh checkout creates out/ (README's first session); an
    ``--out`` that is a link is refused, its target left as it was (issue 38)."""
    written = outputs.write_checked(tmp_path / "out" / "p.json", '{"schema": "mcap.profile/1"}',
                                    "mcap.profile/1")
    assert written.read_text() == '{"schema": "mcap.profile/1"}'
    victim = tmp_path / "victim.json"
    victim.write_text('{"schema": "mcap.profile/1"}')
    (tmp_path / "link.json").symlink_to(victim)
    with pytest.raises(outputs.OutputError, match="symbolic link"):
        outputs.check_out(tmp_path / "link.json", "mcap.profile/1")
    assert victim.read_text() == '{"schema": "mcap.profile/1"}'
