"""A busy or refusing store loses no measured run (issue 28): a measured run waits longer
than an ordinary write (with progress), is kept in the store's recovery file when the store
still refuses it, is printed anyway, and the next command that opens the store imports it,
once. The locks here are real: another process holds ``BEGIN EXCLUSIVE`` on the store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from mcap.core.errors import StoreError
from mcap.core.machine import Machine
from mcap.core.types import Layer, ModelInfo, Run, Setup, StageRun, StageTimes
from mcap.store import Store, recovery
from tests.conftest import REPO

MODEL = ModelInfo("toy:layers=4", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(4)))
SETUP = Setup(stages=2, batch_size=4, chunks=2)
RUN = Run((1, 3), "ok", (1000, 2000), 1.5, 12.0, None,
          times=(StageTimes(((0.1, 0.1),), ((0.2, 0.2),), (0.01,), 64, 64),) * 2,
          estimated=True)
MACHINE = Machine(device="cpu", cpu="Test CPU", isa="AVX2", threads=1, torch="2.0")
TINY = "gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8"


class Holder:
    """Another process holding the store's write lock (``BEGIN EXCLUSIVE``) for ``seconds``,
    or until ``release()``."""

    def __init__(self, path, seconds: float = 120.0):
        code = (f"import sqlite3, sys, time\n"
                f"c = sqlite3.connect({str(path)!r}, isolation_level=None, timeout=30)\n"
                f"c.execute('BEGIN EXCLUSIVE')\n"
                f"print('locked', flush=True)\n"
                f"sys.stdin.readline() if {seconds} < 0 else time.sleep({seconds})\n"
                f"c.execute('COMMIT')\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                     stdin=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "locked"

    def release(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture
def store_path(tmp_path):
    path = tmp_path / "store.sqlite"
    Store(path).close()
    return path


@pytest.mark.integration
def test_a_run_the_busy_store_refuses_is_kept_and_imported_once(store_path, monkeypatch):
    monkeypatch.setenv(recovery.WAIT_ENV, "1")
    store = Store(store_path)
    holder = Holder(store_path)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError) as caught:
            store.keep_run(MODEL, SETUP, RUN, machine=MACHINE)
        assert time.monotonic() - started >= 1.0  # it waited
    finally:
        holder.release()
        store.close()
    kept = recovery.path_of(store_path)
    message = str(caught.value)
    assert "busy" in message and str(kept) in message and "not lost" in message
    assert kept.is_file() and len(kept.read_text().splitlines()) == 1
    saved = kept.read_text()

    with Store(store_path) as s:  # the next command imports it
        records = s.run_records()
        assert [r.run for r in records] == [RUN]
        assert s.get_machine(records[0].machine) == MACHINE
        assert records[0].kind == "measure"
    assert not kept.exists()
    kept.write_text(saved)  # the same line again (a crash between commit and removal)
    with Store(store_path) as s:
        assert len(s.run_records()) == 1  # imported once
    assert not kept.exists()


@pytest.mark.integration
def test_a_busy_store_is_waited_for_with_progress(store_path, monkeypatch):
    monkeypatch.setenv(recovery.WAIT_ENV, "60")
    monkeypatch.setattr(recovery, "PROGRESS_EVERY_S", 0.2)
    store = Store(store_path)
    seen = []
    store.progress = lambda path, waited, limit: seen.append((waited, limit))
    holder = Holder(store_path, seconds=1.5)
    try:
        run_id = store.keep_run(MODEL, SETUP, RUN)
    finally:
        holder.release()
    assert run_id >= 1 and store.runs(1) == (RUN,)
    assert seen and all(limit == 60 for _, limit in seen)  # progress while it waited
    assert not recovery.path_of(store_path).exists()
    store.close()


@pytest.mark.integration
def test_stage_runs_and_profiling_runs_are_kept_too(store_path, monkeypatch):
    monkeypatch.setenv(recovery.WAIT_ENV, "0.5")
    with Store(store_path) as s:
        study = s.study(MODEL, SETUP)
    store = Store(store_path)
    stage = StageRun((1, 3), 1, "ok", 2000, 0.7, RUN.times[1])
    holder = Holder(store_path)
    try:
        with pytest.raises(StoreError, match="recovery.jsonl"):
            store.record_stage(study, stage, machine=MACHINE)
        with pytest.raises(StoreError, match="recovery.jsonl"):
            store.record_run(study.id, RUN, kind="profile")  # by id: looked up to be kept
    finally:
        holder.release()
        store.close()
    assert len(recovery.path_of(store_path).read_text().splitlines()) == 2
    with Store(store_path) as s:
        assert s.stage_runs(study, machine=MACHINE) == (stage,)
        assert [r.kind for r in s.run_records(study)] == ["profile"]


def test_a_recovery_line_that_fails_the_row_checks_stays_and_is_named(store_path, capsys):
    kept = recovery.path_of(store_path)
    good = recovery.run_line(MODEL, SETUP, RUN, kind="measure", job=None, machine=None,
                             created=time.time())
    bad = dict(good, row=dict(good["row"], peaks="[1e999, 2]"))
    kept.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\nnot json\n")
    with Store(store_path) as s:
        assert s.runs(1) == (RUN,)
    err = capsys.readouterr().err
    assert "imported 1 measured run" in err
    assert "line 2 was not imported" in err and "peaks" in err and "line 3" in err
    assert len(kept.read_text().splitlines()) == 2  # the two bad lines stay, the good one left


def test_a_read_only_store_keeps_the_run_in_the_recovery_file(tmp_path, monkeypatch):
    path = tmp_path / "store.sqlite"
    Store(path).close()
    store = Store(path, read_only=True)
    with pytest.raises(StoreError, match="not lost"):
        store.keep_run(MODEL, SETUP, RUN)
    store.close()
    with Store(path) as s:
        assert s.runs(1) == (RUN,)


@pytest.mark.integration
def test_measure_under_a_real_exclusive_lock_prints_keeps_and_the_next_command_imports(tmp_path):
    """A real ``measure --json`` while another process holds the store's exclusive lock the
    whole time: the run is printed, kept in the recovery file named in the message, and the
    next opening of the store imports it; nothing is lost."""
    path = tmp_path / "store.sqlite"
    Store(path).close()
    holder = Holder(path)
    try:
        env = dict(os.environ, MCAP_STORE_WAIT="2", PYTHONPATH=str(REPO))
        proc = subprocess.run([sys.executable, "-m", "mcap", "measure", "--model", TINY,
                               "--balance", "2,2", "--batch-size", "4", "--chunks", "2",
                               "--store", str(path), "--json"], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=300)
    finally:
        holder.release()
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    assert printed["status"] == "ok" and len(printed["peaks"]) == 2
    kept = recovery.path_of(path)
    assert str(kept) in proc.stderr and "busy" in proc.stderr and kept.is_file()
    with Store(path) as s:
        (record,) = s.run_records()
    assert record.run.peaks == tuple(printed["peaks"]) and record.kind == "measure"
    assert record.machine is not None and not kept.exists()


# --- the recovery file is one of the store's own files (issue 38, item 1) ------------------

SECRET = b"line1\r\n\n  \nsecret=hunter2\n\xff\xfe bad bytes\r\n{\"schema\": \"other\"}\nno newline"


def test_a_linked_recovery_file_is_refused_and_its_target_neither_written_nor_printed(
        store_path, tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_bytes(SECRET)
    recovery.path_of(store_path).symlink_to(victim)
    for read_only in (False, None, True):  # commands, the dashboard, export
        with pytest.raises(StoreError, match="recovery file .* is a symbolic link .*victim.txt"):
            Store(store_path, read_only=read_only)
    line = recovery.run_line(MODEL, SETUP, RUN, kind="measure", job=None, machine=None,
                             created=time.time())
    with pytest.raises(StoreError, match="could not be kept.*symbolic link"):
        raise recovery.kept_or_explain(store_path, line, "the store was busy")
    assert victim.read_bytes() == SECRET
    assert "hunter2" not in capsys.readouterr().err


def test_lines_not_imported_stay_byte_for_byte_and_are_named_without_their_content(
        store_path, capsys):
    kept = recovery.path_of(store_path)
    good = recovery.run_line(MODEL, SETUP, RUN, kind="measure", job=None, machine=None,
                             created=time.time())
    kept.write_bytes(SECRET[:-len(b"no newline")] + json.dumps(good).encode() + b"\n"
                     + b"no newline")
    with Store(store_path) as s:
        assert s.runs(1) == (RUN,)
    err = capsys.readouterr().err
    assert kept.read_bytes() == SECRET  # CRs, blank lines, bad bytes and the last line kept
    for secret in ("hunter2", "line1", "bad bytes", "no newline", "other"):
        assert secret not in err, err
    assert "line 4 was not imported" in err and "it is not JSON" in err
    assert "line 5 " in err and "not UTF-8" in err
    assert "line 6 " in err and "not an mcap.recovery/1 record" in err
    assert "line 2 " not in err and "line 3 " not in err  # blank lines are not problems


def test_a_file_nothing_is_imported_from_is_not_written(store_path):
    kept = recovery.path_of(store_path)
    kept.write_bytes(SECRET)
    os.utime(kept, (1_000_000, 1_000_000))
    Store(store_path).close()
    assert kept.read_bytes() == SECRET and kept.stat().st_mtime == 1_000_000


def test_a_kept_run_never_joins_a_last_line_without_a_newline(store_path):
    kept = recovery.path_of(store_path)
    kept.write_bytes(b"a note without a newline")
    line = recovery.run_line(MODEL, SETUP, RUN, kind="measure", job=None, machine=None,
                             created=time.time())
    recovery.keep(store_path, line)
    assert kept.read_bytes().split(b"\n")[0] == b"a note without a newline"
    with Store(store_path) as s:
        assert s.runs(1) == (RUN,)
    assert kept.read_bytes() == b"a note without a newline\n"


@pytest.mark.parametrize("mutate,needle", [
    (lambda p: p.chmod(0o666), "written by every user"),
    (lambda p: os.link(p, p.with_name("other-name")), "2 hard links"),
])
def test_a_recovery_file_another_user_could_have_written_is_refused(store_path, mutate, needle):
    kept = recovery.path_of(store_path)
    kept.write_bytes(SECRET)
    mutate(kept)
    with pytest.raises(StoreError, match=needle):
        Store(store_path)
    assert kept.read_bytes() == SECRET


def test_a_record_with_a_bad_field_is_named_by_the_field_not_its_value(store_path, capsys):
    kept = recovery.path_of(store_path)
    good = recovery.run_line(MODEL, SETUP, RUN, kind="measure", job=None, machine=None,
                             created=time.time())
    bad = dict(good, row=dict(good["row"], status="secret=hunter2"))
    kept.write_text(json.dumps(bad) + "\n")
    Store(store_path).close()
    err = capsys.readouterr().err
    assert "line 1 was not imported" in err and "status" in err and "fails a check" in err
    assert "hunter2" not in err
