"""The store's tables: the schema a new file is created with, the steps that upgrade a store
of an older version in place, and the checks that a file is ours and of a version this code
reads (``mcap.store.opening`` decides when each runs)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

from mcap.core.errors import StoreError

# PRAGMA application_id: ASCII "mcap", written in the SQLite header (offset 68) so any
# tool can tell our files from other applications' databases.
APPLICATION_ID = 0x6D636170
# PRAGMA user_version: bumped whenever the tables change shape; a store of an older
# version is upgraded in place by the steps in _MIGRATIONS when it is opened.
# 2: machine fingerprints; 3: runs.composed (mcap.core.profiling.cover); 4: stages run alone
# (runs.times, runs.estimated, stage_runs: mcap.runner.alone, issue 25).
SCHEMA_VERSION = 4


_SCHEMA = f"""
-- Machine fingerprints (mcap.core.machine): a run is reused only on the same machine.
CREATE TABLE machines (
    key         TEXT PRIMARY KEY,       -- Machine.key()
    record      TEXT NOT NULL,          -- JSON of every Machine field
    created     REAL NOT NULL
);
CREATE TABLE studies (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL UNIQUE,   -- records.study_key(spec, setup)
    spec        TEXT NOT NULL,
    layers      TEXT NOT NULL,          -- JSON [{{"name", "param_bytes"}}, ...]
    setup       TEXT NOT NULL,          -- JSON of every Setup field
    created     REAL NOT NULL
);
CREATE TABLE jobs (
    id          INTEGER PRIMARY KEY,
    kind        TEXT NOT NULL,
    argv        TEXT NOT NULL,          -- JSON list of str
    total       INTEGER NOT NULL,
    done        INTEGER NOT NULL DEFAULT 0,
    current     TEXT,                   -- JSON balance being measured
    status      TEXT NOT NULL CHECK (status IN ('pending','running','done','failed','cancelled')),
    error       TEXT,
    pid         INTEGER,
    study_id    INTEGER REFERENCES studies(id),
    created     REAL NOT NULL,
    updated     REAL NOT NULL
);
CREATE TABLE runs (
    id          INTEGER PRIMARY KEY,
    study_id    INTEGER NOT NULL REFERENCES studies(id),
    job_id      INTEGER REFERENCES jobs(id),
    kind        TEXT NOT NULL CHECK (kind IN ('profile','sweep','measure')),
    balance     TEXT NOT NULL,          -- compact JSON, e.g. [3,3,5,19]
    status      TEXT NOT NULL CHECK (status IN ('ok','oom','failed')),
    peaks       TEXT,                   -- JSON list of int bytes, or NULL
    seconds     REAL NOT NULL,
    samples_per_second REAL,
    error       TEXT,
    breakdown   TEXT,                   -- JSON list of per-stage breakdowns, or NULL
    created     REAL NOT NULL,
    machine     TEXT REFERENCES machines(key), -- Machine.key() it was measured on, NULL: unknown
    composed    INTEGER NOT NULL DEFAULT 0, -- 1: composed from other runs (mcap.core.profiling.cover)
    times       TEXT,                   -- JSON per-stage StageTimes of stages run alone
    estimated   INTEGER NOT NULL DEFAULT 0 -- 1: samples_per_second estimated from times
);
CREATE INDEX runs_study_balance ON runs(study_id, balance);
CREATE INDEX runs_job ON runs(job_id);
-- One stage run alone (mcap.runner.alone): what a sweep measures once per stage key.
CREATE TABLE stage_runs (
    id          INTEGER PRIMARY KEY,
    study_id    INTEGER NOT NULL REFERENCES studies(id),
    job_id      INTEGER REFERENCES jobs(id),
    first_layer INTEGER NOT NULL,
    last_layer  INTEGER NOT NULL,
    position    TEXT NOT NULL,          -- JSON of the key's third part (mcap.core.profiling.cover)
    balance     TEXT NOT NULL,          -- the partitioning it was run as a stage of
    stage       INTEGER NOT NULL,       -- its index there
    status      TEXT NOT NULL CHECK (status IN ('ok','oom','failed')),
    peak        INTEGER,
    seconds     REAL NOT NULL,
    times       TEXT,                   -- JSON StageTimes
    error       TEXT,
    breakdown   TEXT,                   -- JSON breakdown, or NULL
    created     REAL NOT NULL,
    machine     TEXT REFERENCES machines(key)
);
CREATE INDEX stage_runs_study ON stage_runs(study_id, first_layer, last_layer);
CREATE TABLE profiles (
    id          INTEGER PRIMARY KEY,
    study_id    INTEGER NOT NULL REFERENCES studies(id),
    name        TEXT,
    mem_isolated TEXT NOT NULL,         -- JSON list of int
    mem_added   TEXT NOT NULL,          -- JSON list of int|null
    extra       TEXT,                   -- JSON of the file's unknown top-level keys
    created     REAL NOT NULL,
    machine     TEXT REFERENCES machines(key)
);
CREATE TABLE sweeps (
    id          INTEGER PRIMARY KEY,
    study_id    INTEGER NOT NULL REFERENCES studies(id),
    name        TEXT,
    extra       TEXT,                   -- JSON of the file's unknown top-level keys
    created     REAL NOT NULL,
    machine     TEXT REFERENCES machines(key)
);
-- The runs of a saved profile or sweep, in the order they were given.
CREATE TABLE profile_runs (
    profile_id  INTEGER NOT NULL REFERENCES profiles(id),
    position    INTEGER NOT NULL,
    run_id      INTEGER NOT NULL REFERENCES runs(id),
    PRIMARY KEY (profile_id, position)
);
CREATE TABLE sweep_runs (
    sweep_id    INTEGER NOT NULL REFERENCES sweeps(id),
    position    INTEGER NOT NULL,
    run_id      INTEGER NOT NULL REFERENCES runs(id),
    PRIMARY KEY (sweep_id, position)
);
PRAGMA application_id = {APPLICATION_ID};
PRAGMA user_version = {SCHEMA_VERSION};
"""


# From version v to v + 1: statements run in one transaction with the new user_version,
# so a store is upgraded completely or not at all. The result must equal _SCHEMA's tables
# (tests/store/test_core.py opens a version-1 file and compares).
_MIGRATIONS = {
    1: """
CREATE TABLE machines (
    key         TEXT PRIMARY KEY,
    record      TEXT NOT NULL,
    created     REAL NOT NULL
);
ALTER TABLE runs ADD COLUMN machine TEXT REFERENCES machines(key);
ALTER TABLE profiles ADD COLUMN machine TEXT REFERENCES machines(key);
ALTER TABLE sweeps ADD COLUMN machine TEXT REFERENCES machines(key);
""",
    2: """
ALTER TABLE runs ADD COLUMN composed INTEGER NOT NULL DEFAULT 0;
""",
    3: """
ALTER TABLE runs ADD COLUMN times TEXT;
ALTER TABLE runs ADD COLUMN estimated INTEGER NOT NULL DEFAULT 0;
CREATE TABLE stage_runs (
    id          INTEGER PRIMARY KEY,
    study_id    INTEGER NOT NULL REFERENCES studies(id),
    job_id      INTEGER REFERENCES jobs(id),
    first_layer INTEGER NOT NULL,
    last_layer  INTEGER NOT NULL,
    position    TEXT NOT NULL,
    balance     TEXT NOT NULL,
    stage       INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('ok','oom','failed')),
    peak        INTEGER,
    seconds     REAL NOT NULL,
    times       TEXT,
    error       TEXT,
    breakdown   TEXT,
    created     REAL NOT NULL,
    machine     TEXT REFERENCES machines(key)
);
CREATE INDEX stage_runs_study ON stage_runs(study_id, first_layer, last_layer);
""",
}


def _create(conn: sqlite3.Connection, path: Path) -> None:
    """Write the schema into a new file, once, even if several processes race here."""
    conn.execute("BEGIN IMMEDIATE")  # the first process to get here creates; others wait
    try:
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        tables = _table_names(conn)
        if app_id == APPLICATION_ID and tables:
            conn.execute("ROLLBACK")  # another process created it a moment ago
            _check_version(conn, path)
            return
        if tables:  # someone else's database appeared between our check and now
            conn.execute("ROLLBACK")
            raise StoreError(_foreign_message(path, app_id, tables))
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _migrate(conn: sqlite3.Connection, path: Path) -> None:
    """Upgrade a store of an older schema version to SCHEMA_VERSION, one step per
    transaction; several processes opening it at once upgrade it once (the write lock
    is taken before the version is read again)."""
    while conn.execute("PRAGMA user_version").fetchone()[0] < SCHEMA_VERSION:
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version >= SCHEMA_VERSION:  # another process upgraded it meanwhile
                conn.execute("ROLLBACK")
                break
            for statement in _MIGRATIONS[version].split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {version + 1}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise StoreError(f"cannot upgrade store {path} from schema version {version} to "
                             f"{version + 1}: {exc}; nothing was changed") from exc
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version not in _MIGRATIONS and version != SCHEMA_VERSION:
        newer = " (written by a newer mcap)" if version > SCHEMA_VERSION else ""
        raise StoreError(f"store {path} has schema version {version}{newer}, but this mcap "
                         f"reads version {SCHEMA_VERSION} (and upgrades versions "
                         f"{min(_MIGRATIONS)}..{SCHEMA_VERSION - 1}); nothing was changed")


def _table_names(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
    return [row[0] for row in rows]


def _foreign_message(path: Path, app_id: int, tables: list[str]) -> str:
    found = f"tables {', '.join(tables)}" if tables else "no tables"
    return (f"{path} is a SQLite database of another application (application_id "
            f"{app_id:#x}, {found}), not an mcap store (application_id "
            f"{APPLICATION_ID:#x}); nothing was changed")

