"""Every command that opens a store, against a store whose neighbours (``-wal``, ``-shm``,
``-journal``, ``.recovery.jsonl``) are symbolic links to a victim file: each exits 2 naming
the link, and the victim keeps its bytes (issue 38, item 1). SQLite writes its log and its
shared memory through whatever those paths name; mcap checks them before any connection."""
from __future__ import annotations

from pathlib import Path

import pytest

from mcap.io import jsonio
from mcap.store import Store
from mcap.store.opening import NEIGHBOURS
from tests.conftest import DATA, cli

TINY = "gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8"
VICTIM = b"secret=hunter2\r\n\n\xff\xfe not a store\n"


def commands(store, tmp):
    """Every command that opens a store (read-write, and export read-only)."""
    return {
        "measure": ["measure", "--model", TINY, "--balance", "2,2", "--store", store],
        "profile": ["profile", "--model", TINY, "--stages", "2", "--store", store,
                    "--out", tmp / "p.json"],
        "sweep": ["sweep", "--model", TINY, "--stages", "2", "--sample", "1", "--store", store,
                  "--out", tmp / "s.json"],
        "scale": ["scale", "--model", TINY, "--vary", "hidden", "--low", "16", "--high", "32",
                  "--step", "16", "--stages", "2", "--capacity", "1GiB", "--store", store],
        "scale --press": ["scale", "--model", TINY, "--vary", "hidden", "--low", "16", "--high",
                          "32", "--step", "16", "--stages", "2", "--capacity", "1GiB",
                          "--press", "--store", store],
        "export": ["export", "--store", store, "--profile", "1", "--out", tmp / "e.json"],
    }


@pytest.mark.parametrize("suffix", list(NEIGHBOURS))
@pytest.mark.parametrize("command", list(commands(Path("S"), Path("."))))
def test_a_linked_neighbour_is_refused_and_its_target_keeps_its_bytes(capsys, tmp_path,
                                                                       command, suffix):
    store = tmp_path / "store.sqlite"
    with Store(store) as s:  # an existing store with a profile, so export has one to read
        s.save_profile(jsonio.load_profile(DATA / "vgg11-cpu4.profile.json"))
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    link = tmp_path / f"store.sqlite{suffix}"
    link.symlink_to(victim)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, out, err = cli(capsys, *commands(store, tmp_path)[command])
    assert code == 2 and "is a symbolic link" in err and link.name in err, err
    assert victim.read_bytes() == VICTIM and link.is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing created either
    assert "hunter2" not in out + err


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_a_new_store_beside_a_linked_log_is_not_created(capsys, tmp_path, suffix):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    (tmp_path / f"new.sqlite{suffix}").symlink_to(victim)
    code, _, err = cli(capsys, "measure", "--model", TINY, "--balance", "2,2", "--store",
                       tmp_path / "new.sqlite")
    assert code == 2 and "symbolic link" in err
    assert victim.read_bytes() == VICTIM and not (tmp_path / "new.sqlite").exists()


@pytest.mark.app
def test_the_dashboard_says_why_it_cannot_open_such_a_store(tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.conftest import REPO
    store = tmp_path / "store.sqlite"
    Store(store).close()
    victim = tmp_path / "victim.txt"
    victim.write_bytes(VICTIM)
    (tmp_path / "store.sqlite-shm").symlink_to(victim)
    monkeypatch.setenv("MCAP_STORE", str(store))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("pages/profile.py")
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("symbolic link" in e.value for e in at.error), [e.value for e in at.error]
    assert victim.read_bytes() == VICTIM
