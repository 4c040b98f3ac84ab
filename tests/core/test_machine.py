"""Machine fingerprints (issue 11): the pure record and comparison, its JSON form, the
store's per-machine reuse and its schema upgrade, and the CLI's --threads / evaluate checks."""
import dataclasses
import json
import sqlite3

import pytest

from mcap.cli.main import main
from mcap.core.errors import SchemaError
from mcap.core.machine import UNKNOWN, Machine, describe, differences, mismatch
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Run, Setup, Sweep
from mcap.io import jsonio
from mcap.store import SCHEMA_VERSION, Store
from mcap.store.records import study_key

CPU = Machine(device="cpu", cpu="AMD EPYC", isa="AVX2", threads=1, torch="2.13.0+cpu",
              torch_git="cf30153c4c131c8164ee7798e5022d810682e2cb")
H100 = Machine(device="cuda", cpu="Intel Xeon", isa="AVX512", threads=1, torch="2.11.0+cu130",
               cuda="13.0", gpu="NVIDIA H100 80GB HBM3", driver="580.65.06")
MODEL = ModelInfo("toy:layers=4", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(4)))
SETUP = Setup(stages=2, batch_size=8, chunks=2)
STATS = LayerStats(mem_isolated=(100, 200, 300, 400), mem_added=(None, 50, 60, 70))


def ok(balance, peaks):
    return Run(balance, "ok", peaks, 1.0)


# --- the pure record ------------------------------------------------------------------

def test_key_is_stable_and_names_the_fields_that_matter():
    # A literal: a key that changed between releases would orphan every stored run.
    assert CPU.key() == "35639f227feb2c06"
    assert Machine(**dataclasses.asdict(CPU)).key() == CPU.key()
    assert dataclasses.replace(CPU, threads=2).key() != CPU.key()
    assert dataclasses.replace(CPU, isa="AVX512").key() != CPU.key()
    assert len({CPU.key(), H100.key()}) == 2


def test_describe_is_one_line_and_unknown_is_labelled():
    assert CPU.describe() == "AMD EPYC (AVX2, 1 thread), torch 2.13.0+cpu"
    assert H100.describe() == ("NVIDIA H100 80GB HBM3, CUDA 13.0, driver 580.65.06, torch "
                               "2.11.0+cu130; host Intel Xeon (AVX512, 1 thread)")
    assert "2 threads" in dataclasses.replace(CPU, threads=2).describe()
    assert describe(None) == UNKNOWN == "machine unknown"


def test_differences_say_what_changes_the_peaks_of_the_device():
    other = dataclasses.replace(CPU, threads=4, cpu="Intel Xeon", driver="x")
    by = {d.field: d for d in differences(CPU, other)}
    assert set(by) == {"threads", "cpu", "driver"}
    assert by["threads"].changes_peaks and "(1 + 4 x threads)" in by["threads"].effect
    assert not by["cpu"].changes_peaks and not by["driver"].changes_peaks
    gpu = {d.field: d for d in differences(H100, dataclasses.replace(H100, gpu="A100", isa="AVX2"))}
    assert gpu["gpu"].changes_peaks and "cuBLAS" in gpu["gpu"].effect
    assert not gpu["isa"].changes_peaks  # the host does not change GPU peaks
    (only,) = differences(CPU, H100)
    assert only.field == "device" and only.changes_peaks


def test_mismatch_warns_naming_both_machines_only_when_peaks_may_differ():
    text = mismatch(CPU, dataclasses.replace(CPU, isa="AVX512"))
    assert CPU.describe() in text and "AMD EPYC (AVX512, 1 thread)" in text and "isa" in text
    assert mismatch(CPU, CPU) is None
    assert mismatch(CPU, None) is None and mismatch(None, None) is None
    assert mismatch(CPU, dataclasses.replace(CPU, cpu="Intel Xeon")) is None  # same ISA


# --- JSON -----------------------------------------------------------------------------

def test_profile_and_sweep_round_trip_their_machine(tmp_path):
    prof = Profile(MODEL, SETUP, STATS, machine=CPU)
    sw = Sweep(MODEL, SETUP, (ok((1, 3), (1, 2)),), machine=H100)
    jsonio.save(prof, tmp_path / "p.json")
    jsonio.save(sw, tmp_path / "s.json")
    assert json.loads((tmp_path / "p.json").read_text())["machine"]["isa"] == "AVX2"
    assert jsonio.load_profile(tmp_path / "p.json") == prof
    back = jsonio.load_sweep(tmp_path / "s.json")
    assert back.machine == H100 and back.extra is None


def test_older_files_load_as_machine_unknown_with_one_thread():
    d = json.loads(open("data/vgg11-h512-b8-cpu4.profile.json").read())
    del d["machine"], d["setup"]["threads"]  # as files written before fingerprints were
    prof = jsonio.profile_from_dict(d, "old.profile.json")
    assert prof.machine is None and describe(prof.machine) == "machine unknown"
    assert prof.setup.threads == 1
    assert "machine" not in jsonio.profile_to_dict(prof)


def test_a_bad_machine_object_names_the_field(tmp_path):
    d = jsonio.profile_to_dict(Profile(MODEL, SETUP, STATS, machine=CPU))
    d["machine"]["threads"] = "two"
    with pytest.raises(SchemaError, match=r"machine\.threads: expected an integer"):
        jsonio.profile_from_dict(d, "p.json")
    del d["machine"]["isa"]
    with pytest.raises(SchemaError, match="machine: missing key 'isa'"):
        jsonio.profile_from_dict(d, "p.json")


# --- store ----------------------------------------------------------------------------

def test_a_run_is_reused_only_on_the_machine_that_measured_it(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        study = store.study(MODEL, SETUP)
        store.record_run(study, ok((1, 3), (10, 20)), machine=CPU)
        store.record_run(study, ok((2, 2), (30, 40)))  # recorded without a fingerprint
        assert store.find_run(study, (1, 3), machine=CPU).peaks == (10, 20)
        assert store.find_run(study, (1, 3), machine=dataclasses.replace(CPU, threads=2)) is None
        assert store.find_run(study, (1, 3)) is None  # unknown never stands for a machine
        assert store.find_run(study, (2, 2), machine=CPU) is None
        assert store.find_run(study, (2, 2)).peaks == (30, 40)
        keys = [r.machine for r in store.run_records(study)]
        assert keys == [CPU.key(), None] and store.get_machine(CPU.key()) == CPU


def test_profiles_and_sweeps_keep_their_machine_in_the_store(tmp_path):
    with Store(tmp_path / "s.sqlite") as store:
        run = ok((1, 3), (10, 20))
        study = store.study(MODEL, SETUP)
        store.record_run(study, run, machine=CPU)
        pid = store.save_profile(Profile(MODEL, SETUP, STATS, (run,), machine=CPU))
        sid = store.save_sweep(Sweep(MODEL, SETUP, (run,), machine=H100))
        assert store.load_profile(pid).machine == CPU
        assert store.load_sweep(sid).machine == H100
        assert len(store.run_records(study)) == 2  # linked on CPU, a new run for H100
        assert [s.machine for s in store.list_profiles()] == [CPU]
        assert store.load_sweep(store.save_sweep(Sweep(MODEL, SETUP, (run,)))).machine is None


V1_SCHEMA = """CREATE TABLE studies (
 id INTEGER PRIMARY KEY,
 key TEXT NOT NULL UNIQUE,
 spec TEXT NOT NULL,
 layers TEXT NOT NULL,
 setup TEXT NOT NULL,
 created REAL NOT NULL
);
CREATE TABLE jobs (
 id INTEGER PRIMARY KEY,
 kind TEXT NOT NULL,
 argv TEXT NOT NULL,
 total INTEGER NOT NULL,
 done INTEGER NOT NULL DEFAULT 0,
 current TEXT,
 status TEXT NOT NULL CHECK (status IN ('pending','running','done','failed','cancelled')),
 error TEXT,
 pid INTEGER,
 study_id INTEGER REFERENCES studies(id),
 created REAL NOT NULL,
 updated REAL NOT NULL
);
CREATE TABLE runs (
 id INTEGER PRIMARY KEY,
 study_id INTEGER NOT NULL REFERENCES studies(id),
 job_id INTEGER REFERENCES jobs(id),
 kind TEXT NOT NULL CHECK (kind IN ('profile','sweep','measure')),
 balance TEXT NOT NULL,
 status TEXT NOT NULL CHECK (status IN ('ok','oom','failed')),
 peaks TEXT,
 seconds REAL NOT NULL,
 samples_per_second REAL,
 error TEXT,
 breakdown TEXT,
 created REAL NOT NULL
);
CREATE INDEX runs_study_balance ON runs(study_id, balance);
CREATE INDEX runs_job ON runs(job_id);
CREATE TABLE profiles (
 id INTEGER PRIMARY KEY,
 study_id INTEGER NOT NULL REFERENCES studies(id),
 name TEXT,
 mem_isolated TEXT NOT NULL,
 mem_added TEXT NOT NULL,
 extra TEXT,
 created REAL NOT NULL
);
CREATE TABLE sweeps (
 id INTEGER PRIMARY KEY,
 study_id INTEGER NOT NULL REFERENCES studies(id),
 name TEXT,
 extra TEXT,
 created REAL NOT NULL
);
CREATE TABLE profile_runs (
 profile_id INTEGER NOT NULL REFERENCES profiles(id),
 position INTEGER NOT NULL,
 run_id INTEGER NOT NULL REFERENCES runs(id),
 PRIMARY KEY (profile_id, position)
);
CREATE TABLE sweep_runs (
 sweep_id INTEGER NOT NULL REFERENCES sweeps(id),
 position INTEGER NOT NULL,
 run_id INTEGER NOT NULL REFERENCES runs(id),
 PRIMARY KEY (sweep_id, position)
);
PRAGMA application_id = 1835229552;
PRAGMA user_version = 1;"""


# What version 1 wrote for SETUP: no threads, and the device under its old name.
V1_SETUP = {"stages": 2, "batch_size": 8, "chunks": 2, "schedule": "gpipe",
            "checkpoint": "except_last", "backend": "cpu", "capacity_bytes": None,
            "engine": "pipelining", "optimizer": "sgd"}


def _v1_store(path):
    """A store as schema version 1 wrote it, with one study and one run."""
    raw = sqlite3.connect(path)
    raw.executescript(V1_SCHEMA)
    raw.execute("INSERT INTO studies (key, spec, layers, setup, created) VALUES (?, ?, ?, ?, 0)",
                (study_key(MODEL.spec, SETUP), MODEL.spec,
                 json.dumps([{"name": l.name, "param_bytes": l.param_bytes} for l in MODEL.layers]),
                 json.dumps(V1_SETUP)))
    raw.execute("INSERT INTO runs (study_id, kind, balance, status, peaks, seconds, created) "
                "VALUES (1, 'profile', '[1,3]', 'ok', '[10,20]', 1.0, 0)")
    raw.commit()
    raw.close()


def _columns(path):
    raw = sqlite3.connect(path)
    tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")]
    out = {t: [(c[1], c[2]) for c in raw.execute(f"PRAGMA table_info({t})")] for t in tables}
    raw.close()
    return out


def test_a_version_1_store_is_upgraded_in_place_and_keeps_its_runs(tmp_path):
    old = tmp_path / "old.sqlite"
    _v1_store(old)
    with Store(old) as store:
        (record,) = store.run_records()
        assert record.run.peaks == (10, 20) and record.machine is None
        study = store.find_study(MODEL.spec, SETUP)
        assert study is not None and study.setup == SETUP
        assert store.find_run(study, (1, 3)).peaks == (10, 20)
        assert store.find_run(study, (1, 3), machine=CPU) is None  # unknown is not reused
        store.record_run(study, ok((1, 3), (11, 21)), machine=CPU)
        assert store.find_run(study, (1, 3), machine=CPU).peaks == (11, 21)
    raw = sqlite3.connect(old)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION >= 2
    raw.close()
    Store(tmp_path / "new.sqlite").close()
    assert _columns(old) == _columns(tmp_path / "new.sqlite")  # the same tables as a new one
    Store(old).close()  # opening it again changes nothing


def test_the_default_thread_count_keeps_stored_study_keys():
    key = study_key("vgg11", Setup(stages=4))
    assert "threads" not in key
    assert json.loads(study_key("vgg11", Setup(stages=4, threads=2)))["setup"]["threads"] == 2


# --- CLI ------------------------------------------------------------------------------

def test_threads_flag_sets_the_setup_and_rejects_zero(capsys, monkeypatch):
    from mcap.cli.main import build_parser
    from mcap.cli.options import setup_from_args
    monkeypatch.setattr("mcap.cli.options._cores", lambda: 8)  # whatever machine runs this
    args = build_parser().parse_args(["profile", "--model", "vgg11", "--stages", "2",
                                      "--out", "x.json", "--threads", "3"])
    assert setup_from_args(args).threads == 3
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["profile", "--model", "vgg11", "--stages", "2",
                                   "--out", "x.json", "--threads", "0"])
    assert exc.value.code == 2
    assert "threads must be a whole number of at least 1, got '0'" in capsys.readouterr().err


def _pair(tmp_path, profile_machine, sweep_machine):
    p, s = tmp_path / "p.json", tmp_path / "s.json"
    jsonio.save(Profile(MODEL, SETUP, STATS, machine=profile_machine), p)
    jsonio.save(Sweep(MODEL, SETUP, (ok((1, 3), (100, 300)), ok((2, 2), (150, 370))),
                      machine=sweep_machine), s)
    return ["evaluate", "--profile", str(p), "--sweep", str(s), "--no-time",
            "--bo-iterations", "10"]


def test_evaluate_warns_across_machines_and_strict_exits_2(tmp_path, capsys):
    other = dataclasses.replace(CPU, threads=2)
    argv = _pair(tmp_path, CPU, other)
    assert main(argv + ["--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)["machines"]
    assert data["profile"] == CPU.describe() and data["sweep"] == other.describe()
    assert "different machines" in data["warning"] and "threads 1 vs 2" in data["warning"]
    assert "mcap: warning:" in err and CPU.describe() in err and other.describe() in err
    assert main(argv + ["--strict"]) == 2
    assert "(--strict)" in capsys.readouterr().err


def test_evaluate_is_quiet_on_one_machine_and_labels_unknown(tmp_path, capsys):
    assert main(_pair(tmp_path, CPU, CPU) + ["--json", "--strict"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["machines"]["warning"] is None and "warning" not in err
    assert main(_pair(tmp_path, None, CPU) + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["machines"]["profile"] == "machine unknown"


def test_collect_records_the_setup_threads_and_a_onednn_isa_cap(monkeypatch):
    torch = pytest.importorskip("torch")
    from mcap.runner.machine import collect
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    here = collect(Setup(stages=2, threads=3))
    assert here.threads == 3 and here.device == "cpu" and here.gpu is None
    assert here.isa == torch.backends.cpu.get_cpu_capability()
    assert here.torch == torch.__version__
    # oneDNN picks kernels (and workspaces) by its own ISA cap, which torch does not report
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx")
    capped = collect(Setup(stages=2, threads=3))
    assert capped.isa.endswith("oneDNN max AVX") and capped.key() != here.key()
