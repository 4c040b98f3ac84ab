"""The measured link between stage processes (mcap/runner/link.py): measured for real once,
then kept per machine on disk (mcap/runner/machinecache.py), the cache file treated as data."""
from __future__ import annotations

import json
import os
import time

import pytest

from mcap.core.errors import McapError
from mcap.core.types import Setup
from mcap.runner import link, machinecache


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """An empty cache folder of the test's own, and no link kept in the process."""
    monkeypatch.setenv(machinecache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(link, "_cache", {})
    return tmp_path / "cache"


def _count_measures(monkeypatch, answer=None):
    """Replace the measurement by a counter (answering ``answer``); the list of calls."""
    calls = []

    def fake(device, how):
        calls.append((device, how))
        if answer is None:
            raise AssertionError("the link was measured although it was kept")
        return answer

    monkeypatch.setattr(link, "measure", fake)
    return calls


@pytest.mark.integration
def test_a_link_is_measured_for_real_once_then_read_from_the_machines_cache(cache_dir, monkeypatch):
    setup = Setup(stages=4, batch_size=8, chunks=2, device="cpu")
    first = link.link_for(setup)  # two real processes ping-pong through gloo
    assert first.how == "gloo" and first.latency >= 0 and first.bytes_per_second > 0
    doc = json.loads((cache_dir / machinecache.CACHE_FILE).read_text())
    assert [e["value"]["how"] for e in doc["links"]] == ["gloo"]
    # A new process (nothing kept in memory) reads it back and measures nothing.
    monkeypatch.setattr(link, "_cache", {})
    _count_measures(monkeypatch)
    again = link.link_for(setup)
    assert (again.latency, again.bytes_per_second, again.how, again.slots) == \
        (first.latency, first.bytes_per_second, first.how, first.slots)


def test_an_entry_of_another_machine_or_too_old_is_measured_again(cache_dir, monkeypatch):
    mine = link.machine_key("cpu", "gloo")
    other = json.loads(mine)
    other["host"] = other["host"] + "-elsewhere"
    link.keep(json.dumps(other, sort_keys=True, separators=(",", ":")), link.Link(1e-3, 5e9, "gloo"))
    assert link.cached(mine) is None  # another host's link is not this one's
    link.keep(mine, link.Link(2e-5, 3e9, "gloo"))
    assert link.cached(mine) == link.Link(2e-5, 3e9, "gloo")
    assert link.cached(mine, now=time.time() + machinecache.MAX_AGE_S + 60) is None
    doc = json.loads((cache_dir / machinecache.CACHE_FILE).read_text())
    assert len(doc["links"]) == 2  # keeping one machine's link leaves the other's


ENTRY = '{"version": 1, "links": [{"key": "%%s", "measured_at": %%f, "value": %s}]}'


@pytest.mark.parametrize("text", [
    "not json", "[]", '{"version": 2, "links": []}', '{"version": 1, "links": {}}',
    '{"version": 1, "links": [{"key": "%s", "measured_at": "%f", "value": {"how": "gloo", '
    '"latency": 1e-5, "bytes_per_second": 1e9}}]}',
    ENTRY % '{"how": "gloo", "latency": NaN, "bytes_per_second": 1e9}',
    ENTRY % '{"how": "gloo", "latency": 1e-5, "bytes_per_second": -1}',
    ENTRY % '{"how": "gloo", "latency": "1e-5", "bytes_per_second": 1e9}',
    ENTRY % '{"how": "gloo", "latency": true, "bytes_per_second": 1e9}',
    ENTRY % '{"how": 7, "latency": 1e-5, "bytes_per_second": 1e9}',
    ENTRY % '[1, 2]',
    ENTRY % '{"how": "gloo", "latency": 1e-5, "bytes_per_second": 1e400}',  # inf
    "[" * 200_000 + "]" * 200_000,  # deeper than the parser goes
    '{"version": 1, "links": [], "pad": "' + "x" * (2 << 20) + '"}',  # larger than ours ever is
])
def test_a_broken_cache_file_costs_a_measurement_and_is_replaced_whole(cache_dir, monkeypatch,
                                                                       text):
    cache_dir.mkdir()
    path = cache_dir / machinecache.CACHE_FILE
    mine = link.machine_key("cpu", "gloo")
    if "%s" in text:
        text = text % (mine.replace('"', '\\"'), time.time())
    path.write_text(text)
    calls = _count_measures(monkeypatch, link.Link(4e-5, 2e9, "gloo"))
    got = link.link_for(Setup(stages=4, batch_size=8, chunks=2, device="cpu"))
    assert calls == [("cpu", "gloo")] and (got.latency, got.bytes_per_second) == (4e-5, 2e9)
    doc = json.loads(path.read_text())  # now a valid file holding the new measurement
    assert [(e["value"]["latency"], e["value"]["bytes_per_second"]) for e in doc["links"]] \
        == [(4e-5, 2e9)]
    assert [p.name for p in cache_dir.iterdir()] == [machinecache.CACHE_FILE]  # no temporary left


def test_off_keeps_nothing_on_disk_and_an_unwritable_cache_only_costs_time(tmp_path, monkeypatch):
    setup = Setup(stages=4, batch_size=8, chunks=2, device="cpu")
    monkeypatch.setenv(machinecache.CACHE_ENV, "off")
    monkeypatch.setattr(link, "_cache", {})
    calls = _count_measures(monkeypatch, link.Link(4e-5, 2e9, "gloo"))
    monkeypatch.setattr(machinecache.Path, "home", lambda: tmp_path / "home")
    link.link_for(setup)
    assert calls == [("cpu", "gloo")] and not (tmp_path / "home").exists()
    # The cache's path is a folder (or cannot be written): the run goes on, measured.
    blocked = tmp_path / "blocked"
    (blocked / machinecache.CACHE_FILE).mkdir(parents=True)
    monkeypatch.setenv(machinecache.CACHE_ENV, str(blocked))
    monkeypatch.setattr(link, "_cache", {})
    got = link.link_for(setup)
    assert got.bytes_per_second == 2e9 and len(calls) == 2
    assert os.listdir(blocked) == [machinecache.CACHE_FILE]


def test_a_cache_path_that_is_not_a_regular_file_is_never_read(cache_dir, monkeypatch):
    """A link to an endless device (or a folder) is skipped, not read."""
    cache_dir.mkdir()
    (cache_dir / machinecache.CACHE_FILE).symlink_to("/dev/zero")
    calls = _count_measures(monkeypatch, link.Link(4e-5, 2e9, "gloo"))
    got = link.link_for(Setup(stages=4, batch_size=8, chunks=2, device="cpu"))
    assert calls == [("cpu", "gloo")] and got.bytes_per_second == 2e9
    assert (cache_dir / machinecache.CACHE_FILE).is_file()  # the link replaced, /dev/zero untouched


# --- the cache's folder is its own (issue 38: MCAP_CACHE_DIR=/ wrote /machine.json) --------

def test_a_folder_holding_other_files_is_refused_and_nothing_is_written_there(
        tmp_path, monkeypatch, capsys):
    home = tmp_path / "home"
    (home / "notes").mkdir(parents=True)
    (home / ".bashrc").write_text("x")
    monkeypatch.setenv(machinecache.CACHE_ENV, str(home))
    monkeypatch.setattr(machinecache, "_warned", set())
    with pytest.raises(McapError, match=r"\$MCAP_CACHE_DIR=.* holds files that are not "
                                        r"mcap's \(\.bashrc, notes\)"):
        machinecache.check_folder()
    for _ in range(2):
        machinecache.write("links", "k", {"x": 1}, lambda v: True)
    assert sorted(p.name for p in home.iterdir()) == [".bashrc", "notes"]
    warned = capsys.readouterr().err
    assert warned.count("not kept") == 1 and "holds files that are not mcap's" in warned
    monkeypatch.setenv(machinecache.CACHE_ENV, "/")
    assert "/ holds files that are not mcap's" in machinecache.problem()


def test_a_linked_or_shared_cache_folder_is_refused(tmp_path, monkeypatch):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    monkeypatch.setenv(machinecache.CACHE_ENV, str(tmp_path / "link"))
    assert "symbolic link" in machinecache.problem()
    real.chmod(0o777)
    monkeypatch.setenv(machinecache.CACHE_ENV, str(real))
    assert "every user" in machinecache.problem()
    monkeypatch.setenv(machinecache.CACHE_ENV, "x" * 5000)
    assert "above the system's limit" in machinecache.problem()
    monkeypatch.setenv(machinecache.CACHE_ENV, str(tmp_path / "new" / "cache"))
    assert machinecache.problem() is None  # created when first written


def test_a_cache_file_another_user_could_have_written_is_not_read(cache_dir, monkeypatch):
    cache_dir.mkdir()
    mine = link.machine_key("cpu", "gloo")
    path = cache_dir / machinecache.CACHE_FILE
    path.write_text(json.dumps({"version": 1, "links": [{"key": mine, "measured_at": time.time(),
                                "value": {"how": "gloo", "latency": 1.0,
                                          "bytes_per_second": 1.0}}]}))
    path.chmod(0o666)
    calls = _count_measures(monkeypatch, link.Link(4e-5, 2e9, "gloo"))
    got = link.link_for(Setup(stages=4, batch_size=8, chunks=2, device="cpu"))
    assert calls == [("cpu", "gloo")] and got.latency == 4e-5  # measured, not the planted 1 s
    assert not path.stat().st_mode & 0o002  # replaced by a file of mcap's own
