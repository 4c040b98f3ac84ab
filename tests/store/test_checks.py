"""Store rows are data (issue 28): a corrupt column is a StoreError naming the table, row and
column on the CLI and an st.error in the dashboard, never a JSONDecodeError, RecursionError or
OverflowError traceback; a row that passes is one a file would pass (what export writes,
predict reads). A store is a regular file or a new path; a read-only one is read."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from mcap.core.errors import McapError, StoreError
from mcap.io import jsonio
from mcap.store import Store
from tests.conftest import REPO, cli, no_hang

DATA = REPO / "data"
TINY = "gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8"


@pytest.fixture
def store(tmp_path):
    """A store holding the bundled VGG11 profile (id 1) and sweep (id 1)."""
    path = tmp_path / "store.sqlite"
    with Store(path) as s:
        s.save_profile(jsonio.load_profile(DATA / "vgg11-cpu4.profile.json"))
        s.save_sweep(jsonio.load_sweep(DATA / "vgg11-cpu4-seed1-sample150.sweep.json"))
    return path


def corrupt(path, sql, *args):
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA ignore_check_constraints = ON")
    conn.execute(sql, args)
    conn.close()


# The cases, then one bad value per kind of column read back.
BAD_ROWS = [
    ("UPDATE runs SET peaks = ?", "not json", "runs row 1: peaks: not valid JSON"),
    ("UPDATE runs SET peaks = ?", "[" * 100_000 + "]" * 100_000, "nested deeper than 64"),
    ("UPDATE profiles SET mem_isolated = ?", "[1e999]", "mem_isolated[0]: expected an integer"),
    ("UPDATE studies SET layers = ?", "[]", "studies row 1: layers: the model has no layers"),
    ("UPDATE studies SET setup = ?", '{"stages":"x"}', "missing key 'batch_size'"),
    ("UPDATE studies SET setup = ?", json.dumps({"stages": "x", "batch_size": 8, "chunks": 4,
     "schedule": "gpipe", "checkpoint": "except_last", "device": "cpu", "capacity_bytes": None,
     "engine": "pipelining", "optimizer": "sgd"}), "setup.stages: expected an integer"),
    ("UPDATE runs SET balance = ?", "[1, 2]", "is not a partitioning of 30 layers"),
    ("UPDATE runs SET seconds = ?", "soon", "runs row 1: seconds: expected a number"),
    ("UPDATE runs SET peaks = ?", "[9e18, 1, 1, 1]", "peaks: expected an integer"),
    ("UPDATE runs SET peaks = ?", json.dumps([2**62, 1, 1, 1]), "out of range"),
    ("UPDATE runs SET times = ?", '[{"forward": 1}]', "times"),
    ("UPDATE runs SET breakdown = ?", '[{"weights": 1}]', "missing key"),
    ("UPDATE runs SET composed = ?", 7, "composed: expected 0 or 1"),
    ("UPDATE profiles SET extra = ?", "[1]", "extra: expected an object"),
    ("UPDATE profiles SET extra = ?", '{"__mcap_variants__": [{"batch_size": 1e999}]}',
     "variants[0].batch_size"),
    ("UPDATE runs SET created = ?", float("inf"), "created: expected a time"),
    ("UPDATE machines SET record = ?", "{}", "missing key"),
]


@pytest.mark.parametrize("sql,value,needle", BAD_ROWS, ids=[f"{i}" for i in range(len(BAD_ROWS))])
def test_a_corrupt_row_is_a_store_error_naming_the_column(capsys, tmp_path, store, sql, value,
                                                         needle):
    if "machines" in sql:  # the bundled profile has no machine: give it one
        corrupt(store, "INSERT INTO machines (key, record, created) VALUES ('m', '{}', 0)")
        corrupt(store, "UPDATE profiles SET machine = 'm'")
    corrupt(store, sql, value)
    code, _, err = cli(capsys, "export", "--store", store, "--profile", "1",
                       "--out", tmp_path / "p.json")
    assert code == 2 and needle in err and f"store {store}" in err, err
    assert not (tmp_path / "p.json").exists()


def test_what_export_writes_from_the_store_predict_reads(capsys, tmp_path, store):
    code, _, err = cli(capsys, "export", "--store", store, "--sweep", "1", "--out",
                       tmp_path / "s.json")
    assert code == 0, err
    code, _, err = cli(capsys, "export", "--store", store, "--profile", "1", "--out",
                       tmp_path / "p.json")
    assert code == 0, err
    code, out, err = cli(capsys, "predict", "--profile", tmp_path / "p.json", "--balance",
                         "3,3,5,19", "--json")
    assert code == 0 and json.loads(out)["balance"] == [3, 3, 5, 19]


def test_the_store_api_reads_no_row_without_checking_it(store):
    raw = sqlite3.connect(store)
    (in_sweep,) = raw.execute("SELECT run_id FROM sweep_runs ORDER BY position").fetchone()
    raw.close()
    corrupt(store, "UPDATE runs SET peaks = 'not json' WHERE id IN (3, ?)", in_sweep)
    with Store(store) as s:
        for call in (lambda: s.run_records(), lambda: s.runs(1), lambda: s.load_profile(1)):
            with pytest.raises(StoreError, match="runs row 3: peaks"):
                call()
        with pytest.raises(StoreError, match=f"runs row {in_sweep}: peaks"):
            s.load_sweep(1)
        s.create_job("profile", ["x"], 3)
    corrupt(store, "UPDATE jobs SET argv = '[1]'")
    with Store(store) as s, pytest.raises(StoreError, match=r"jobs row 1: argv\[0\]"):
        s.list_jobs()


def test_the_store_refuses_to_write_what_it_could_not_read_back(tmp_path):
    from mcap.core.types import Layer, ModelInfo, Run, Setup
    model = ModelInfo("toy", (Layer("a", 1), Layer("b", 1)))
    with Store(tmp_path / "s.sqlite") as s:
        study = s.study(model, Setup(stages=2))
        with pytest.raises(McapError, match="1 PiB"):
            s.record_run(study, Run((1, 1), "ok", (2**62, 1), 1.0))
        with pytest.raises(McapError, match="seconds"):
            s.record_run(study, Run((1, 1), "ok", (1, 1), 1e12))
        assert s.runs(study) == ()


def test_the_dashboard_shows_a_corrupt_row_as_an_error(tmp_path, store, monkeypatch):
    from streamlit.testing.v1 import AppTest
    corrupt(store, "UPDATE runs SET peaks = ? WHERE id = 1", "[" * 100_000 + "]" * 100_000)
    corrupt(store, "UPDATE studies SET setup = 'not json'")
    monkeypatch.setenv("MCAP_STORE", str(store))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.query_params["profile"] = "store:profile:1"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(e.value for e in at.error)
    assert "studies row 1: setup: not valid JSON" in shown
    assert str(store.parent) not in shown  # the store by its name, not the server's path


# --- what a store is ------------------------------------------------------------------

def test_a_device_or_fifo_is_no_store(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in (("/dev/null", "character device"), (fifo, "FIFO")):
        with no_hang():
            code, _, err = cli(capsys, "measure", "--model", TINY, "--balance", "2,2",
                               "--store", path)
        assert code == 2 and kind in err and "regular file" in err, err
        with pytest.raises(StoreError, match=kind), no_hang():
            Store(path)
    assert not os.path.exists("/dev/null-journal") and not os.path.exists("/dev/null-wal")


def test_the_dashboard_says_dev_null_is_no_store(monkeypatch):
    from streamlit.testing.v1 import AppTest
    monkeypatch.setenv("MCAP_STORE", "/dev/null")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("pages/profile.py")
    at.run()
    assert not at.exception
    assert any("character device" in e.value for e in at.error), [e.value for e in at.error]
    assert not os.path.exists("/dev/null-journal")


def test_export_names_a_folder_or_fifo_as_what_it_is(capsys, tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, needle in ((tmp_path, "is a directory"), (fifo, "is a FIFO"),
                         (tmp_path / "none.sqlite", "does not exist")):
        with no_hang():
            code, _, err = cli(capsys, "export", "--store", path, "--profile", "1", "--out",
                               tmp_path / "p.json")
        assert code == 2 and needle in err, err


def _read_only_mount(folder: Path, command: list[str]) -> subprocess.CompletedProcess:
    """``command`` run with ``folder`` bind-mounted read-only over itself (a user and mount
    namespace: no root needed where user namespaces are allowed)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here to make a read-only mount")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not allowed here: {probe.stderr.decode().strip()}")
    script = (f"mount --bind -o ro {shlex.quote(str(folder))} {shlex.quote(str(folder))} && "
              + " ".join(shlex.quote(c) for c in command))
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=120)


def test_a_store_on_a_read_only_mount_is_exported_and_viewed(tmp_path, store):
    out = tmp_path / "out"
    out.mkdir()
    folder = store.parent / "ro"
    folder.mkdir()
    store.rename(folder / "store.sqlite")
    ro = folder / "store.sqlite"
    before = sorted(p.name for p in folder.iterdir())
    done = _read_only_mount(folder, [sys.executable, "-m", "mcap", "export", "--store", str(ro),
                                     "--profile", "1", "--out", str(out / "p.json")])
    assert done.returncode == 0, done.stderr
    assert jsonio.load_profile(out / "p.json").model.spec.startswith("vgg11")
    viewed = _read_only_mount(folder, [sys.executable, "-c",
                                       "from mcap.store import Store; "
                                       f"s = Store({str(ro)!r}, read_only=None); "
                                       "print(s.read_only, len(s.list_profiles()))"])
    assert viewed.stdout.split() == ["True", "1"], viewed.stderr
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing created beside it


def test_an_older_store_read_only_is_upgraded_in_memory_only(tmp_path):
    from tests.core.test_machine import _v1_store
    old = tmp_path / "old.sqlite"
    _v1_store(old)  # schema version 1: no machines, no stage_runs, no times
    before = old.read_bytes()
    with Store(old, read_only=True) as s:
        (record,) = s.run_records()
        assert record.run.peaks == (10, 20) and s.stage_runs(1) == ()
    assert old.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "old.sqlite"]
