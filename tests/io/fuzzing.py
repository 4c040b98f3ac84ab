"""Seeded mutations of the bundled JSON files, and the readers they are fed to (issue 12).

Used by tests/io/test_fuzz.py (a fast subset) and bench/bench_fuzz.py (>= 500 per
reader). A reader passes an input when it returns exit code 0 or 2 (or, for the loader,
a value or an McapError); anything else (an uncaught exception, another code) is a finding.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Callable, Optional

DATA = Path(__file__).resolve().parents[2] / "data"
PROFILE = DATA / "vgg11-cpu4.profile.json"
SWEEP = DATA / "vgg11-cpu4-seed1-sample150.sweep.json"

_VALUES = [None, True, False, 0, -1, 1, -(2**63), 2**63, 10**30, -(10**30), 1e308, -1e308,
           float("nan"), float("inf"), float("-inf"), 0.5, -0.5, "", "x", "12", "1e400", [],
           {}, [1, 2], {"a": 1}, "mcap_hostile_xyz:make", "os:system:command=true", "\u00b2",
           "\x00", "a" * 10000]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:6]) if len(obj) > 6 else enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    if not path:
        return value
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return obj


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def mutate(text: str, rng: random.Random) -> bytes:
    """One mutated document: a field's type, sign or size changed, a key deleted, deep
    nesting, a truncation, raw byte noise, or another encoding."""
    kind = rng.choice(("value", "value", "value", "sign", "delete", "nest", "truncate",
                       "bytes", "encoding", "grow", "swap"))
    if kind == "truncate":
        return text[: rng.randrange(len(text))].encode()
    if kind == "bytes":
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == "encoding":
        return text.encode(rng.choice(("utf-16", "utf-16-le", "utf-32", "latin-1")), "replace")
    doc = json.loads(text)
    paths = list(_paths(doc))
    path = rng.choice(paths)
    if kind == "value":
        doc = _set(doc, path, rng.choice(_VALUES))
    elif kind == "sign":
        v = _get(doc, path)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            doc = _set(doc, path, -v if v else -1)
        else:
            doc = _set(doc, path, -rng.randint(1, 10**12))
    elif kind == "delete" and path:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
    elif kind == "nest":
        v = _get(doc, path)
        for _ in range(rng.choice((2, 50, 5000))):
            v = [v]
        doc = _set(doc, path, v)
    elif kind == "grow":
        v = _get(doc, path)
        if isinstance(v, list) and v:
            doc = _set(doc, path, v * rng.choice((2, 50)))
        else:
            doc = _set(doc, path, rng.choice((10**rng.randint(10, 5000), "9" * 100)))
    elif kind == "swap":
        doc = _set(doc, path, rng.choice(([doc] if not path else []) + [[], "[]", 3]))
    try:
        return json.dumps(doc).encode()
    except (ValueError, RecursionError):
        return text.encode()


def _cli(argv) -> tuple[Optional[int], str]:
    from mcap.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    except BaseException as exc:  # noqa: BLE001  (the finding itself)
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"
    text = err.getvalue()
    if "Traceback" in text:
        return None, text[-300:]
    return code, text


def _loader(path: Path, _other: Path) -> tuple[Optional[int], str]:
    from mcap.core.errors import McapError
    from mcap.io.jsonio import load_any
    try:
        load_any(path)
        return 0, ""
    except McapError as exc:
        return 2, str(exc)
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


def _upload(path: Path, _other: Path):
    from mcap.core.errors import McapError
    from mcap.io.datasets import load_upload
    try:
        load_upload("fuzz.json", path.read_bytes())
        return 0, ""
    except McapError as exc:
        return 2, str(exc)
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


# reader name -> (which bundled file is mutated, how it is read)
READERS: dict[str, tuple[Path, Callable]] = {
    "loader(profile)": (PROFILE, _loader),
    "loader(sweep)": (SWEEP, _loader),
    "upload": (PROFILE, _upload),
    "predict": (PROFILE, lambda p, o: _cli(["predict", "--profile", p, "--balance", "3,3,5,19"])),
    "recommend": (PROFILE, lambda p, o: _cli(["recommend", "--profile", p, "--stages", "4"])),
    "recommend-time": (PROFILE, lambda p, o: _cli(["recommend", "--profile", p, "--stages", "4",
                                                   "--method", "time"])),
    "evaluate(profile)": (PROFILE, lambda p, o: _cli(["evaluate", "--profile", p, "--sweep", SWEEP,
                                                      "--no-time", "--bo-iterations", "10"])),
    "evaluate(sweep)": (SWEEP, lambda p, o: _cli(["evaluate", "--profile", PROFILE, "--sweep", p,
                                                  "--no-time", "--bo-iterations", "10"])),
}


def run(reader: str, count: int, seed: int, folder: Path) -> tuple[dict, list[str]]:
    """Feed ``count`` mutated inputs to one reader: a tally of exit codes and the findings."""
    source, read = READERS[reader]
    text = source.read_text()
    rng = random.Random(f"{reader}:{seed}")
    tally: dict = {}
    findings: list[str] = []
    for i in range(count):
        data = mutate(text, rng)
        path = folder / f"fuzz-{i}.json"
        path.write_bytes(data)
        code, why = read(path, source)
        tally[code] = tally.get(code, 0) + 1
        if code not in (0, 2):
            findings.append(f"{reader} input {i} (seed {seed}): code {code}: {why}")
            (folder / f"finding-{reader}-{i}.json").write_bytes(data)
        path.unlink()
    return tally, findings


# --- store rows (issue 28) -----------------------------------------------------------------
#
# A store written by mcap, then one column of one row changed as a hand edit, another
# program or a disk error might change it (SQLite stores any type in any column; CHECK
# constraints are switched off for the edit), then every reader of the store: the Store API,
# the resume logic, the dashboard's dataset listing and loading, and `export` (whose file
# must then load: a store row that passes is one a file would pass). A reader passes when it
# returns, or raises an McapError (exit 2); anything else is a finding.

STORE_TABLES = ("machines", "studies", "jobs", "runs", "stage_runs", "profiles", "sweeps",
                "profile_runs", "sweep_runs")
_ROW_VALUES = [None, 0, 1, -1, 2, 2**63 - 1, -(2**63), 0.5, -0.5, 1e308, float("inf"),
               float("-inf"), "", "x", "not json", "null", "true", "0", "-1", "1e999", "[]",
               "{}", "[1e999]", "[-1]", "[1, 2]", "[[1]]", '{"a": 1}', '"text"', "[null]",
               "[" * 100_000 + "]" * 100_000, "[" * 70 + "]" * 70, "9" * 5000, "[" + "9" * 5000 + "]",
               '{"stages": "x"}', '[{"name": "a"}]', "\x00", "\u00b2", "a" * 10_000,
               b"\x00\xff\x10binary", b""]


def base_store(path: Path) -> Path:
    """A store with a row in every table: two profiles (one with MPress statistics, one with
    CAPTURE variants), a sweep, runs with times, breakdowns, machines and a job, stages run
    alone with their times."""
    from mcap.core.types import MemoryBreakdown, Run, StageRun, StageTimes
    from mcap.io import jsonio
    from mcap.store import Store
    press = jsonio.load_profile(DATA / "vgg11-b8-never-cpu4-press.profile.json")
    dptp = jsonio.load_profile(DATA / "gpt-l8-h128-cpu8-dptp.profile.json")
    sweep = jsonio.load_sweep(DATA / "gpt-l8-h256-cpu4-full.sweep.json")
    times = StageTimes(((0.01, 0.02),), ((0.03, 0.04),), (0.005,), 4096, 4096)
    with Store(path) as store:
        store.save_profile(press, name="press")
        store.save_profile(dptp, name="dptp")
        store.save_sweep(sweep, name="sweep")
        study = store.study(sweep.model, sweep.setup)
        job = store.create_job("sweep", ["sweep", "--model", sweep.model.spec], 3, study=study)
        store.update_job(job, current=(3, 2, 3, 2), pid=1, status="running", done=1)
        balance = (3, 2, 3, 2)
        store.record_run(study, Run(balance, "ok", (1, 2, 3, 4), 1.5, 10.0,
                                    breakdown=(MemoryBreakdown(1, 2, 3, 4),) * 4,
                                    times=(times,) * 4, estimated=True),
                         kind="sweep", job=job, machine=sweep.machine)
        for stage in range(4):
            store.record_stage(study, StageRun(balance, stage, "ok", 1000 + stage, 0.5, times,
                                               breakdown=MemoryBreakdown(1, 2, 3, 4)),
                               job=job, machine=sweep.machine)
        store.record_stage(study, StageRun((2, 2, 3, 3), 0, "oom", None, 0.1,
                                           error="out of memory"), machine=sweep.machine)
    return path


def store_columns(path: Path) -> list[tuple[str, str]]:
    import sqlite3
    conn = sqlite3.connect(path)
    try:
        return [(t, row[1]) for t in STORE_TABLES
                for row in conn.execute(f"PRAGMA table_info({t})")]
    finally:
        conn.close()


def mutate_row(path: Path, table: str, column: str, rng: random.Random) -> Optional[str]:
    """Change ``column`` of a random row of ``table`` in place; what was written, or None when
    SQLite refused it (NOT NULL, a primary key, uniqueness): the caller tries another."""
    import sqlite3
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA ignore_check_constraints = ON")
        rows = conn.execute(f"SELECT rowid, {column} FROM {table}").fetchall()
        if not rows:
            return None
        rowid, current = rng.choice(rows)
        if isinstance(current, str) and current[:1] in "[{" and rng.random() < 0.5:
            value = mutate(current, rng).decode("utf-8", "replace")  # its JSON, mutated
        else:
            value = rng.choice(_ROW_VALUES)
        conn.execute(f"UPDATE {table} SET {column} = ? WHERE rowid = ?", (value, rowid))
        shown = repr(value)
        return f"{table}.{column} of row {rowid} = {shown[:60]}{'...' if len(shown) > 60 else ''}"
    except sqlite3.Error:
        return None
    finally:
        conn.close()


def store_readers(path: Path, folder: Path) -> list[tuple[str, Callable]]:
    """Every way a command or the dashboard reads the store, each a call of its own."""
    from mcap.store import Store

    def api(name):
        def call():
            with Store(path) as s:
                getattr(s, name)()
        return call

    def each(kind):
        def call():
            with Store(path) as s:
                ids = [x.id for x in (s.list_profiles() if kind == "profile" else s.list_sweeps())]
            for i in ids:
                with Store(path) as s:
                    s.load_profile(i) if kind == "profile" else s.load_sweep(i)
        return call

    def studies():
        from mcap.workflow.reuse import stored_knowledge
        with Store(path) as s:
            for summary in s.list_studies():
                study = s.get_study(summary.id)
                s.runs(study)
                read = set()  # machines whose stage runs and knowledge were read
                for record in s.run_records(study):
                    machine = s.get_machine(record.machine) if record.machine else None
                    s.find_run(study, record.run.balance, machine=machine)
                    if record.machine not in read:  # the same rows again: read once
                        read.add(record.machine)
                        s.stage_runs(study, machine=machine)
                        stored_knowledge(s, study, study.setup, machine)
                s.find_study(study.model.spec, study.setup)

    def jobs():
        with Store(path) as s:
            for job in s.list_jobs():
                s.job(job.id)
                s.job_runs(job.id)

    def dashboard():
        from mcap.io import datasets
        with Store(path, read_only=None) as s:
            for ref in datasets.in_store(s):
                datasets.load(ref, s)

    def export(kind, i):
        def call():
            out = folder / f"export-{kind}-{i}.json"
            code, why = _cli(["export", "--store", path, f"--{kind}", i, "--out", out])
            if code == 0:
                from mcap.io.jsonio import load_any
                try:
                    load_any(out)  # what export wrote, the file reader must read
                finally:
                    out.unlink()
            elif code is None:
                raise RuntimeError(why)
        return call

    return [("open", lambda: Store(path).close()),
            ("list_studies", api("list_studies")), ("list_profiles", api("list_profiles")),
            ("list_sweeps", api("list_sweeps")), ("run_records", api("run_records")),
            ("list_jobs", api("list_jobs")), ("load_profile", each("profile")),
            ("load_sweep", each("sweep")), ("studies", studies), ("jobs", jobs),
            ("dashboard", dashboard),
            *[(f"export --profile {i}", export("profile", i)) for i in (1, 2)],
            ("export --sweep 1", export("sweep", 1))]


def run_store(count: int, seed: int, folder: Path) -> tuple[dict, list[str], dict]:
    """``count`` store mutations, the columns taken in turn (every column of every table),
    each followed by every reader: (tally of outcomes, findings, mutations per table)."""
    import shutil
    from mcap.core.errors import McapError
    base = base_store(folder / "base.sqlite")
    columns = store_columns(base)
    rng = random.Random(f"store:{seed}")
    tally: dict = {}
    per_table: dict = {}
    findings: list[str] = []
    done = tries = 0
    while done < count and tries < 20 * count:
        table, column = columns[done % len(columns)]
        tries += 1
        path = folder / "fuzz.sqlite"
        shutil.copyfile(base, path)
        what = mutate_row(path, table, column, rng)
        if what is None:
            continue
        done += 1
        per_table[table] = per_table.get(table, 0) + 1
        for name, read in store_readers(path, folder):
            try:
                read()
                code = 0
            except McapError:
                code = 2
            except BaseException as exc:  # noqa: BLE001  (the finding itself)
                code = None
                findings.append(f"{what}: {name}: {type(exc).__name__}: {str(exc)[:200]}")
            tally[code] = tally.get(code, 0) + 1
        for p in folder.glob("fuzz.sqlite*"):
            p.unlink()
    return tally, findings, per_table
