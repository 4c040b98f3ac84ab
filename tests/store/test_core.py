"""The results store: round-trips, studies, find_run, transactions, jobs, concurrency,
and refusing corrupt or foreign files without changing a byte of them."""
from __future__ import annotations

import dataclasses
import os
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mcap.core.errors import InvalidPartitioning, McapError, StoreError
from mcap.store import APPLICATION_ID, SCHEMA_VERSION, Store, open_store
from mcap.store.records import study_key
from mcap.core.types import (Layer, LayerStats, MemoryBreakdown, ModelInfo, Profile, Run, Setup,
                        Sweep)
from tests.conftest import REPO

MODEL = ModelInfo("toy:width=8", tuple(Layer(f"layers.{i}", 1000 * (i + 1)) for i in range(6)))
SETUP = Setup(stages=2)
GIB = 1 << 30


def ok_run(balance=(3, 3), peaks=(5 * GIB, 7 * GIB + 1), seconds=1.25):
    breakdown = tuple(MemoryBreakdown(weights=p // 4, gradients=p // 4, optimizer=p // 4,
                                      other=p - 3 * (p // 4)) for p in peaks)
    return Run(balance=balance, status="ok", peaks=peaks, seconds=seconds,
               samples_per_second=25.6, error=None, breakdown=breakdown)


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store.sqlite") as s:
        yield s


# --- round-trips ------------------------------------------------------------------------

def test_run_round_trips_across_reopen(tmp_path):
    path = tmp_path / "store.sqlite"
    runs = [ok_run(),
            Run((2, 4), "oom", (3 * GIB, 2**50), 0.5, None, "over capacity 4294967296"),
            Run((1, 5), "failed", None, 30.0, None, "stage 1 timed out after 30 s")]
    with Store(path) as s:
        study = s.study(MODEL, SETUP)
        ids = [s.record_run(study, r, kind="measure") for r in runs]
    with Store(path) as s:
        assert s.runs(study.id) == tuple(runs)
        assert s.runs(study, ok_only=True) == (runs[0],)
        records = s.run_records(study)
        assert [r.id for r in records] == ids
        assert {r.kind for r in records} == {"measure"}
        assert s.get_study(study.id) == study
        assert s.find_study(MODEL.spec, SETUP) == study


@settings(max_examples=40, deadline=None)
@given(peaks=st.lists(st.integers(0, 2**50), min_size=3, max_size=3),
       seconds=st.floats(0, 1e9), sps=st.none() | st.floats(0, 1e9),
       error=st.none() | st.text(max_size=40))
def test_any_run_round_trips_exactly(tmp_path_factory, peaks, seconds, sps, error):
    # Byte counts up to 1 PiB (the bound files and rows are read with) and float64 seconds
    # must come back bit for bit.
    setup = Setup(stages=3)
    run = Run((1, 2, 3), "ok", tuple(peaks), seconds, sps, error,
              tuple(MemoryBreakdown(p, 0, 1, 2) for p in peaks))
    with Store(tmp_path_factory.mktemp("s") / "store.sqlite") as s:
        study = s.study(MODEL, setup)
        s.record_run(study, run)
        assert s.runs(study) == (run,)
        assert s.find_run(study, [1, 2, 3]) == run


def test_profile_and_sweep_round_trip(store):
    stats = LayerStats(mem_isolated=(10, 20, 30, 40, 50, 2**40),
                       mem_added=(None, 5, -3, 0, 7, 2**40))
    profile = Profile(MODEL, SETUP, stats, (ok_run((1, 5)), ok_run((5, 1)),
                                            Run((2, 4), "oom", None, 0.1)),
                      extra={"host": "vm-2", "notes": ["seeded", 3]})
    sweep = Sweep(MODEL, SETUP, tuple(ok_run((k, 6 - k), seconds=k) for k in range(1, 6)))
    pid = store.save_profile(profile, name="toy profile")
    sid = store.save_sweep(sweep)
    assert store.load_profile(pid) == profile
    assert store.load_profile(pid).extra == {"host": "vm-2", "notes": ["seeded", 3]}
    assert store.load_sweep(sid) == sweep
    assert store.load_sweep(sid).extra is None
    [p] = store.list_profiles()
    assert (p.id, p.name, p.spec, p.setup, p.num_runs) == (pid, "toy profile", MODEL.spec, SETUP, 3)
    [w] = store.list_sweeps()
    assert (w.id, w.name, w.num_runs) == (sid, None, 5)
    assert p.study_id == w.study_id  # same model and setup: one study
    [study] = store.list_studies()
    assert (study.spec, study.setup, study.num_runs) == (MODEL.spec, SETUP, 8)


def test_saving_a_profile_links_runs_already_recorded(store):
    # The profile command records each run as it finishes, then saves the profile made
    # from the same runs: they must not be stored twice.
    study = store.study(MODEL, SETUP)
    runs = (ok_run((1, 5)), ok_run((5, 1)), ok_run((3, 3)))
    for r in runs:
        store.record_run(study, r)
    profile = Profile(MODEL, SETUP, LayerStats((1,) * 6, (None,) + (1,) * 5), runs + (runs[0],))
    pid = store.save_profile(profile)
    assert store.load_profile(pid) == profile
    # Three recorded, plus the repeated measurement of (1, 5) which is a separate record.
    assert len(store.runs(study)) == 4


def test_a_merged_profile_links_the_real_models_runs_without_copying_them(store):
    """profile --merge-to (CAPTURE III-A3) records each run over the real layers in the real
    model's study; saving the merged profile copied every one of them again, over merged
    layers, into a study of the merged model (which nothing can build). They are linked
    now: one record per measurement, and the profile loads with its merged runs."""
    from mcap.app.searches import measured_runs
    from mcap.core.capture import merging
    sizes = (2, 1, 2, 1)  # 6 real layers -> 4 merged ones
    real = store.study(MODEL, SETUP)
    measured = (ok_run((2, 4)), ok_run((3, 3)), Run((5, 1), "oom", None, 0.5))
    for r in measured:
        store.record_run(real, r)
    store.record_run(real, ok_run((1, 5)), kind="measure")  # splits a merged layer
    merged = merging.merge_profile(Profile(MODEL, SETUP, LayerStats((1,) * 6, (None,) + (1,) * 5)),
                                   sizes)
    composed = dataclasses.replace(ok_run((3, 1)), seconds=0.0, samples_per_second=None,
                                   composed=True)  # not recorded: saved with the profile
    runs = tuple(dataclasses.replace(r, balance=merging.contract(r.balance, sizes))
                 for r in measured) + (composed,)
    profile = dataclasses.replace(merged, runs=runs)
    pid = store.save_profile(profile, name="merged")

    assert store.load_profile(pid) == profile
    assert store.load_profile(pid).extra == profile.extra
    assert store.run_records()[:4] == store.run_records(real)[:4]  # nothing copied
    assert [r.run.balance for r in store.run_records()] == [
        (2, 4), (3, 3), (5, 1), (1, 5), (5, 1)]  # + the composed run, over the real layers
    assert store.runs(real)[-1].composed
    home = store.find_study(profile.model.spec, SETUP)
    assert home is not None and store.runs(home) == ()  # the profile's model, no runs
    [p] = store.list_profiles()
    assert (p.spec, p.num_runs, p.study_id) == (profile.model.spec, 4, home.id)
    assert store.save_profile(profile) != pid and len(store.run_records()) == 5  # again: linked
    # the dashboard's measured runs of the merged profile: the real ones over merged layers
    found = measured_runs(profile, store=store)
    assert set(found) == set(runs) and len(found) == 2 * len(runs)


def test_a_merged_profile_without_its_real_study_keeps_its_runs(store):
    """A merged profile saved where the real model's runs are not (another store): its runs
    stay in its own study, and it loads as saved."""
    from mcap.core.capture import merging
    sizes = (2, 1, 2, 1)
    merged = merging.merge_profile(Profile(MODEL, SETUP, LayerStats((1,) * 6, (None,) + (1,) * 5)),
                                   sizes)
    profile = dataclasses.replace(merged, runs=(ok_run((1, 3)), ok_run((2, 2))))
    pid = store.save_profile(profile)
    assert store.load_profile(pid) == profile
    [study] = store.list_studies()
    assert (study.spec, study.num_runs) == (profile.model.spec, 2)


def test_missing_items_are_named(store):
    for call, what in ((store.load_profile, "profile 7"), (store.load_sweep, "sweep 7"),
                       (store.job, "job 7"), (store.get_study, "study 7")):
        with pytest.raises(McapError, match=what):
            call(7)


# --- studies ----------------------------------------------------------------------------

def test_setups_that_differ_never_mix(store):
    a = store.study(MODEL, Setup(stages=2, batch_size=32))
    b = store.study(MODEL, Setup(stages=2, batch_size=64))
    c = store.study(MODEL, Setup(stages=2, batch_size=32, capacity_bytes=GIB))
    assert len({a.id, b.id, c.id}) == 3
    assert store.study(MODEL, Setup(stages=2, batch_size=32)) == a
    store.record_run(a, ok_run())
    assert store.find_run(b, (3, 3)) is None
    assert store.runs(b) == ()


def test_every_setup_field_round_trips_and_keys_the_study(store):
    unusual = Setup(stages=3, batch_size=7, chunks=7, schedule="1f1b", checkpoint="never",
                    device="cuda", capacity_bytes=80 * GIB, engine="torchgpipe",
                    optimizer="adam")
    study = store.study(MODEL, unusual)
    assert store.get_study(study.id).setup == unusual
    assert store.get_study(study.id).model == MODEL
    [summary] = store.list_studies()
    assert summary.setup == unusual
    for field in ("batch_size", "chunks", "schedule", "checkpoint", "device",
                  "capacity_bytes", "engine", "optimizer"):
        default = Setup(stages=3)
        changed = dataclasses.replace(unusual, **{field: getattr(default, field)})
        assert store.study(MODEL, changed).id != study.id, field


def test_study_key_text_is_stable():
    # Stored studies are found again by this text: changing its format orphans them.
    assert study_key("vgg11:image_size=32", Setup(stages=4)) == (
        '{"setup":{"backend":"cpu","batch_size":32,"capacity_bytes":null,'
        '"checkpoint":"except_last","chunks":4,"engine":"pipelining","optimizer":"sgd",'
        '"schedule":"gpipe","stages":4},"spec":"vgg11:image_size=32"}')


def test_same_spec_with_other_layers_is_refused(store):
    store.study(MODEL, SETUP)
    changed = ModelInfo(MODEL.spec, MODEL.layers[:-1] + (Layer("layers.5", 1),))
    with pytest.raises(StoreError, match="layer 5 was layers.5/6000 bytes, now layers.5/1"):
        store.study(changed, SETUP)


# --- find_run ---------------------------------------------------------------------------

def test_find_run_returns_latest_finished_and_retries_failed(store):
    study = store.study(MODEL, SETUP)
    assert store.find_run(study, (3, 3)) is None
    store.record_run(study, Run((3, 3), "failed", None, 2.0, None, "killed"))
    assert store.find_run(study, (3, 3)) is None  # failed: run it again
    first = ok_run(seconds=1.0)
    store.record_run(study, first)
    assert store.find_run(study, (3, 3)) == first
    later_oom = Run((3, 3), "oom", None, 0.2, None, "over capacity")
    store.record_run(study, later_oom)
    store.record_run(study, Run((3, 3), "failed", None, 2.0, None, "killed"))
    assert store.find_run(study, [3, 3]) == later_oom  # latest ok/oom, failures skipped
    assert store.find_run(study, (2, 4)) is None


# --- validation and transactions --------------------------------------------------------

@pytest.mark.parametrize("run, message", [
    (ok_run(balance=(3, 2), peaks=(1, 2)), r"balance \[3, 2\] sums to 5 but the model "
                                           r"'toy:width=8' has 6 layers"),
    (ok_run(balance=(2, 2, 2), peaks=(1, 2, 3)), r"has 3 stages but the study's setup has 2"),
    (ok_run(balance=(6, 0), peaks=(1, 2)), r"balance \[6, 0\] has a stage with no layers"),
    (Run((3, 3), "ok", None, 1.0), r"an ok run needs its peaks"),
    (Run((3, 3), "ok", (1,), 1.0), r"peaks \[1\]; expected 2"),
    (Run((3, 3), "ok", (1, -2), 1.0), r"peaks \[1, -2\]"),
    (Run((3, 3), "done", (1, 2), 1.0), r"got 'done'"),
    (Run((3, 3), "ok", (1, 2), float("nan")), r"seconds=nan"),
])
def test_bad_runs_are_refused_and_nothing_is_written(store, run, message):
    study = store.study(MODEL, SETUP)
    with pytest.raises(McapError, match=message):
        store.record_run(study, run)
    assert store.runs(study) == ()


def test_a_failing_save_leaves_nothing_half_written(store):
    # The sixth run is wrong: the five before it, the study and the sweep must vanish.
    runs = tuple(ok_run((k, 6 - k)) for k in range(1, 6)) + (ok_run((4, 4)),)
    with pytest.raises(InvalidPartitioning, match="sums to 8"):
        store.save_sweep(Sweep(MODEL, Setup(stages=2, batch_size=8), runs))
    assert store.list_studies() == ()
    assert store.list_sweeps() == ()
    assert store.find_study(MODEL.spec, Setup(stages=2, batch_size=8)) is None
    with sqlite3.connect(store.path) as raw:
        assert raw.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def test_profile_with_wrong_statistics_length_is_refused(store):
    bad = Profile(MODEL, SETUP, LayerStats((1, 2), (None, 1)), ())
    with pytest.raises(McapError, match="2 mem_isolated and 2 mem_added values but the "
                                        "model has 6 layers"):
        store.save_profile(bad)
    assert store.list_profiles() == () and store.list_studies() == ()


def test_runner_numpy_values_are_stored_as_plain_ints(store):
    np = pytest.importorskip("numpy")
    study = store.study(MODEL, SETUP)
    run = Run(tuple(np.array([2, 4])), "ok", tuple(np.array([2**40, 7], dtype=np.int64)),
              np.float64(0.5), np.float32(3.0))
    store.record_run(study, run)
    [back] = store.runs(study)
    assert back == Run((2, 4), "ok", (2**40, 7), 0.5, 3.0)
    assert all(type(p) is int for p in back.peaks)


def test_handles_from_elsewhere_are_refused(store, tmp_path):
    with Store(tmp_path / "other.sqlite") as other:
        foreign = other.study(ModelInfo("gpt:layers=4", MODEL.layers), SETUP)
    store.study(MODEL, SETUP)  # id 1 here too, but another study
    with pytest.raises(McapError, match="has no study 1 for 'gpt:layers=4'"):
        store.record_run(foreign, ok_run())
    with pytest.raises(McapError, match="has no job 9"):
        store.record_run(store.study(MODEL, SETUP), ok_run(), job=9)
    assert store.runs(1) == ()


def test_store_refuses_use_across_fork(store):
    study = store.study(MODEL, SETUP)
    pid = os.fork()
    if pid == 0:  # child: must be told to open its own store, and must not write
        try:
            store.record_run(study, ok_run())
            os._exit(1)
        except StoreError as exc:
            os._exit(0 if "must open it again" in str(exc) else 2)
        except BaseException:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.runs(study) == ()


def test_closed_store_says_so(tmp_path):
    s = Store(tmp_path / "store.sqlite")
    s.close()
    with pytest.raises(StoreError, match="is closed"):
        s.list_jobs()


# --- jobs -------------------------------------------------------------------------------

def test_job_lifecycle_and_its_runs(store):
    study = store.study(MODEL, SETUP)
    jid = store.create_job("profile", ["python", "-m", "mcap", "profile"], total=5)
    job = store.job(jid)
    assert (job.status, job.done, job.total, job.current, job.pid) == ("pending", 0, 5, None, None)
    assert job.argv == ("python", "-m", "mcap", "profile")
    store.update_job(jid, status="running", pid=4242, study=study)
    for k, balance in enumerate([(1, 5), (2, 4)], start=1):
        store.update_job(jid, current=balance)
        store.record_run(study, ok_run(balance), job=jid)
        job = store.update_job(jid, done=k)
    assert (job.done, job.current, job.pid, job.study_id) == (2, (2, 4), 4242, study.id)
    assert [r.run.balance for r in store.job_runs(jid)] == [(1, 5), (2, 4)]
    assert all(r.job_id == jid and r.kind == "profile" for r in store.job_runs(jid))
    store.record_run(study, ok_run((3, 3)))  # not the job's
    assert len(store.job_runs(jid)) == 2
    job = store.update_job(jid, status="cancelled", current=None)
    assert job.finished and job.current is None
    # The killed child's last word cannot undo the cancel.
    assert store.update_job(jid, status="running", done=3).status == "cancelled"
    other = store.create_job("sweep", [], total=0)
    assert [j.id for j in store.list_jobs()] == [other, jid]


@pytest.mark.parametrize("change, message", [
    ({"status": "paused"}, "got 'paused'"), ({"done": -1}, "done must be an int >= 0, got -1"),
    ({"current": "3,3"}, "current must be a balance such as")])
def test_bad_job_updates_are_refused(store, change, message):
    jid = store.create_job("profile", [], total=3)
    with pytest.raises(McapError, match=message):
        store.update_job(jid, **change)
    assert store.job(jid).status == "pending"


# --- paths ------------------------------------------------------------------------------

def test_default_path_is_dot_mcap_under_cwd(tmp_path, monkeypatch):
    monkeypatch.delenv("MCAP_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    with open_store() as s:
        assert s.path == tmp_path / ".mcap" / "store.sqlite"
    assert (tmp_path / ".mcap" / "store.sqlite").stat().st_size > 0


def test_mcap_store_variable_wins(tmp_path, monkeypatch):
    target = tmp_path / "deep" / "er" / "results.sqlite"
    monkeypatch.setenv("MCAP_STORE", str(target))
    with open_store() as s:
        assert s.path == target
        s.study(MODEL, SETUP)
    with open_store(target) as s:
        assert len(s.list_studies()) == 1


def test_new_store_records_application_and_version(tmp_path):
    Store(tmp_path / "s.sqlite").close()
    with sqlite3.connect(tmp_path / "s.sqlite") as raw:
        assert raw.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


# --- corrupt and foreign files: refused, byte for byte untouched ------------------------

def _store_file(tmp_path) -> bytes:
    """The bytes of a real store holding enough runs to span several pages."""
    path = tmp_path / "good.sqlite"
    with Store(path) as s:
        s.save_sweep(Sweep(MODEL, SETUP, tuple(ok_run((k % 5 + 1, 5 - k % 5), seconds=k)
                                               for k in range(300))))
    return path.read_bytes()


def _foreign_db(path: Path) -> None:
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        raw.execute("INSERT INTO customers (name) VALUES ('ada')")
    raw.close()


def _newer_store(path: Path) -> None:
    Store(path).close()
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA user_version = 99")
    raw.close()


def _empty_sqlite(path: Path) -> None:
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE t (x)")
        raw.execute("DROP TABLE t")
    raw.close()


CASES = {
    "json text": (lambda p, good: p.write_text('{"schema": "mcap.profile/1"}'),
                  r"is not a SQLite database \(it starts with b'\{\"schema\""),
    "binary noise": (lambda p, good: p.write_bytes(bytes(range(256)) * 40),
                     "is not a SQLite database"),
    "short header": (lambda p, good: p.write_bytes(good[:40]), "its header is 40 bytes"),
    "truncated store": (lambda p, good: p.write_bytes(good[: len(good) // 2]), "corrupt"),
    "overwritten pages": (lambda p, good: p.write_bytes(good[:5000] + b"\xa5" * 6000
                                                        + good[11000:]), "corrupt"),
    "another application": (lambda p, good: _foreign_db(p),
                            "another application .*application_id 0x0, tables customers"),
    "empty foreign SQLite": (lambda p, good: _empty_sqlite(p), "application_id 0x0, no tables"),
    "newer schema": (lambda p, good: _newer_store(p),
                     "schema version 99 \\(written by a newer mcap\\), but this mcap reads "
                     f"version {SCHEMA_VERSION}"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_corrupt_or_foreign_file_is_refused_untouched(tmp_path, case):
    make, message = CASES[case]
    good = _store_file(tmp_path)
    path = tmp_path / "victim.sqlite"
    make(path, good)
    before = path.read_bytes()
    with pytest.raises(StoreError, match=message) as info:
        Store(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == before
    assert not Path(str(path) + "-wal").exists()  # nothing was journalled into it either


def test_directory_path_is_refused(tmp_path):
    with pytest.raises(StoreError, match="is a directory"):
        Store(tmp_path)


def test_zero_byte_file_becomes_a_store(tmp_path):
    path = tmp_path / "new.sqlite"
    path.touch()  # e.g. from mkstemp: empty, so nobody's data
    with Store(path) as s:
        s.study(MODEL, SETUP)
    assert len(Store(path).list_studies()) == 1


# --- concurrency ------------------------------------------------------------------------

_WRITER = textwrap.dedent("""
    import os, sys, time
    from mcap.store import Store
    from mcap.core.types import Layer, ModelInfo, Run, Setup
    model = ModelInfo("toy:width=8", tuple(Layer(f"layers.{i}", 1000 * (i + 1)) for i in range(6)))
    ready = sys.argv[1] + ".reader-ready"
    deadline = time.time() + 20
    while sys.argv[3] == "wait" and not os.path.exists(ready) and time.time() < deadline:
        time.sleep(0.01)  # start writing once the reader is reading
    with Store(sys.argv[1]) as s:
        study = s.study(model, Setup(stages=2))
        job = s.create_job("sweep", sys.argv, total=int(sys.argv[2]))
        s.update_job(job, status="running", pid=os.getpid())
        for k in range(int(sys.argv[2])):
            s.record_run(study, Run((k % 5 + 1, 5 - k % 5), "ok", (k, k + 1), 0.01), job=job)
            s.update_job(job, done=k + 1, current=(k % 5 + 1, 5 - k % 5))
        s.update_job(job, status="done")
    print("wrote", sys.argv[2])
""")

_READER = textwrap.dedent("""
    import sys, time
    from mcap.store import Store
    seen, deadline = [], time.time() + 60
    with Store(sys.argv[1]) as s:
        open(sys.argv[1] + ".reader-ready", "w").close()
        while time.time() < deadline:
            n = sum(x.num_runs for x in s.list_studies())
            for job in s.list_jobs():  # the Profile page's poll
                assert len(s.job_runs(job.id)) >= job.done, "a run was counted before stored"
            seen.append(n)
            if n >= int(sys.argv[2]):
                break
    assert seen == sorted(seen), "a reader saw runs disappear"
    between = sum(0 < n < int(sys.argv[2]) for n in seen)
    print("read", len(seen), "snapshots,", between, "mid-write, last", seen[-1])
""")


def _spawn(script, *args):
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_reader_reads_while_two_writers_write(tmp_path):
    path = tmp_path / "store.sqlite"
    Store(path).close()
    n = 150
    procs = [_spawn(_WRITER, path, n, "wait"), _spawn(_WRITER, path, n, "wait"),
             _spawn(_READER, path, 2 * n)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert "locked" not in err
    assert outs[2][0].startswith("read")
    print(outs[2][0])  # how many snapshots the reader took while the writers wrote
    with Store(path) as s:
        [study] = s.list_studies()
        assert study.num_runs == 2 * n
        assert sorted(j.done for j in s.list_jobs()) == [n, n]


@pytest.mark.integration
def test_processes_racing_to_create_one_store(tmp_path):
    path = tmp_path / "fresh" / "store.sqlite"
    # 8 processes: the old WAL switch (no retry) lost this race in 4 of 440 opens (8 at a time)
    procs = [_spawn(_WRITER, path, 3, "go") for _ in range(8)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    with Store(path) as s:
        assert [x.num_runs for x in s.list_studies()] == [24]


def test_one_store_shared_by_threads(store):
    # Streamlit runs each session's script in its own thread with one cached Store.
    study = store.study(MODEL, SETUP)
    errors = []

    def work(k):
        try:
            for _ in range(20):
                store.record_run(study, ok_run((k + 1, 5 - k)))
                store.runs(study)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.runs(study)) == 80
