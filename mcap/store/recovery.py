"""Nothing measured is lost when the store is busy (issue 28).

A run is measured for minutes; the store may be locked meanwhile by another process (a
long export, a backup tool, a person in ``sqlite3`` with a write transaction open) or
refuse the write (a full disk, a read-only remount). Recording a measured run therefore

1. waits longer than an ordinary write, reporting progress (:data:`WAIT_ENV`,
   default :data:`DEFAULT_WAIT_S` seconds), then
2. if the store still refuses it, appends the run as one JSON line to the *recovery file*
   beside the store (``STORE.recovery.jsonl``) and raises ``StoreError`` naming that file;
   the command prints its result anyway, and
3. the next command that opens the store read-write imports the file's runs (each once:
   a run already imported is recognised by its study, balance, kind and time) and removes
   the lines it imported.

The recovery file is data like any store row: each line is read with the checks rows pass
(``mcap.store.records``, ``mcap.core.fields``); a line that fails them stays in the file and
is named, never executed or guessed at. Appends and imports hold an exclusive ``flock`` on
the file, so two processes never interleave lines or import one twice.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from mcap.core import fields
from mcap.core.errors import McapError, StoreError
from mcap.store import records as rec

SUFFIX = ".recovery.jsonl"
SCHEMA = "mcap.recovery/1"
WAIT_ENV = "MCAP_STORE_WAIT"
DEFAULT_WAIT_S = 600.0
PROGRESS_EVERY_S = 10.0
# A recovery file holds a few runs (one per busy write); a larger one is not read whole.
MAX_RECOVERY_BYTES = 256 * 2**20


def path_of(store_path) -> Path:
    return Path(f"{store_path}{SUFFIX}")


def wait_seconds() -> float:
    """How long a measured run waits for a busy store: ``$MCAP_STORE_WAIT`` seconds (a
    number 0 .. a week), else DEFAULT_WAIT_S (a bad value is warned about, not refused:
    the run is measured already)."""
    text = os.environ.get(WAIT_ENV)
    if text is None:
        return DEFAULT_WAIT_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 7 * 86400:  # a run is at stake here: warn, never refuse
        print(f"mcap: warning: ${WAIT_ENV}={text[:40]!r} is not seconds between 0 and "
              f"604800; waiting {DEFAULT_WAIT_S:.0f} s", file=sys.stderr)
        return DEFAULT_WAIT_S
    return value


def busy(exc: BaseException) -> bool:
    """Whether a write failed because another process holds the store's lock."""
    text = str(exc.__cause__ or exc).lower()
    return "locked" in text or "busy" in text


def stderr_progress(store_path, waited: float, limit: float) -> None:
    print(f"mcap: the store {store_path} is busy (another process holds its lock); waited "
          f"{waited:.0f} s of {limit:.0f} s to record the measured run (${WAIT_ENV} sets "
          f"the wait)", file=sys.stderr, flush=True)


# --- writing a record --------------------------------------------------------------------

def run_line(model, setup, run, *, kind: str, job: Optional[int], machine,
             created: float) -> dict:
    """One recovery line for a ``runs`` row: the study's model and setup in their column
    forms, the run's columns, where and when it was measured."""
    balance, status, peaks, seconds, sps, error, breakdown = rec.run_values(run)
    return {"schema": SCHEMA, "table": "runs", "spec": model.spec,
            "layers": rec.model_to_json(model), "setup": rec.setup_to_json(setup),
            "kind": kind, "job": job, "created": created,
            "machine": None if machine is None else rec.machine_to_json(machine),
            "row": {"balance": balance, "status": status, "peaks": peaks, "seconds": seconds,
                    "samples_per_second": sps, "error": error, "breakdown": breakdown,
                    "composed": int(run.composed), "times": rec.times_to_json(run.times),
                    "estimated": int(run.estimated)}}


def stage_line(model, setup, run, *, job: Optional[int], machine, created: float) -> dict:
    """One recovery line for a ``stage_runs`` row (a stage measured alone)."""
    return {"schema": SCHEMA, "table": "stage_runs", "spec": model.spec,
            "layers": rec.model_to_json(model), "setup": rec.setup_to_json(setup),
            "job": job, "created": created,
            "machine": None if machine is None else rec.machine_to_json(machine),
            "row": {"balance": rec.balance_text(run.balance), "stage": int(run.stage),
                    "status": run.status, "peak": None if run.peak is None else int(run.peak),
                    "seconds": float(run.seconds), "times": rec.times_to_json(run.times),
                    "error": run.error,
                    "breakdown": rec.breakdown_to_json(None if run.breakdown is None
                                                       else (run.breakdown,))}}


@contextmanager
def _locked(path: Path, mode: str) -> Iterator:
    """The file open (created when missing) under an exclusive flock. An import removes the
    file once it is empty; a process that was waiting for the lock then holds the removed
    file, so it opens the path again until the file it locked is the one the path names."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | (os.O_APPEND if mode == "a" else 0), 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same:
            break
        os.close(fd)
    try:
        yield fd
    finally:
        os.close(fd)  # releases the lock


def keep(store_path, line: dict) -> Path:
    """Append ``line`` to the store's recovery file (created when missing), fsynced."""
    path = path_of(store_path)
    data = (json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n").encode()
    with _locked(path, "a") as fd:
        os.write(fd, data)
        os.fsync(fd)
    return path


def kept_or_explain(store_path, line: dict, why: str) -> StoreError:
    """The StoreError a command raises when the store refused a measured run: ``line`` kept
    in the recovery file (named), or, if even that failed, said so with the run's values."""
    try:
        path = keep(store_path, line)
    except OSError as exc:
        row = line["row"]
        return StoreError(f"{why}. The measured run could not be kept in "
                          f"{path_of(store_path)} either ({exc.strerror or exc}); its values: "
                          f"balance {row['balance']}, status {row['status']}, peaks "
                          f"{row.get('peaks', row.get('peak'))}")
    return StoreError(f"{why}. The measured run was not lost: it is kept in {path}, which "
                      f"the next command that opens this store imports")


# --- importing ---------------------------------------------------------------------------

def pending(store_path) -> bool:
    try:
        return path_of(store_path).stat().st_size > 0
    except OSError:
        return False


def import_into(store, note: Callable[[str], None]) -> int:
    """Import the store's recovery file into ``store`` (open read-write) in one
    transaction; returns the runs imported. Lines that cannot be read or stored stay in the
    file and are named through ``note``; a store still busy leaves the file for later."""
    path = path_of(store.path)
    if not pending(store.path):
        return 0
    try:
        with _locked(path, "r+") as fd:
            size = os.fstat(fd).st_size
            if size > MAX_RECOVERY_BYTES:
                note(f"the recovery file {path} is {size:,} bytes, above the limit of "
                     f"{MAX_RECOVERY_BYTES:,}; it was not imported")
                return 0
            with os.fdopen(os.dup(fd), "rb") as fh:
                lines = fh.read().decode("utf-8", "replace").splitlines()
            done, kept, problems = _import_lines(store, lines)
            if done is None:  # busy: try again next time
                return 0
            os.ftruncate(fd, 0)
            if kept:
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, ("\n".join(kept) + "\n").encode())
                os.fsync(fd)
            else:
                os.unlink(path)
    except OSError as exc:
        note(f"cannot import the recovery file {path}: {exc.strerror or exc}")
        return 0
    if done:
        note(f"imported {done} measured run{'' if done == 1 else 's'} kept in {path} while "
             f"the store was busy")
    for line_no, problem in problems:
        note(f"{path} line {line_no} was not imported and stays in the file: {problem}")
    return done


def _import_lines(store, lines: list[str]):
    """(runs imported or None when the store is busy, lines kept, problems)."""
    kept, problems, parsed = [], [], []
    for n, text in enumerate(lines, 1):
        if not text.strip():
            continue
        r = fields.Reader(f"recovery line {n}", StoreError)
        try:
            parsed.append((n, text, _decode(fields.loads(text, r, "line"), r)))
        except McapError as exc:
            kept.append(text)
            problems.append((n, str(exc)))
    if not parsed:
        return 0, kept, problems
    try:
        done, refused = store._import_recovered([item for _, _, item in parsed])
    except StoreError as exc:
        if busy(exc):
            return None, kept, problems
        raise
    for (n, text, _), why in zip(parsed, refused):
        if why is not None:
            kept.append(text)
            problems.append((n, why))
    return done, kept, problems


def _decode(d, r: fields.Reader) -> dict:
    """A recovery line checked as the rows it becomes are (``mcap.store.records``)."""
    d = r.obj(d, "line")
    if d.get("schema") != SCHEMA:
        raise r.fail("schema", f"expected {SCHEMA!r}, found {fields.show(d.get('schema'))}")
    table = d.get("table")
    if table not in ("runs", "stage_runs"):
        raise r.fail("table", f"expected 'runs' or 'stage_runs', found {fields.show(table)}")
    model = rec.model_from_json(d.get("spec"), d.get("layers"), r)
    setup = rec.setup_from_json(d.get("setup"), r)
    machine = rec.machine_from_json(d.get("machine"), r)
    created = rec.when(d.get("created"), r, "created")
    job = rec.row_id(d.get("job"), r, "job", nullable=True)
    row = r.obj(r.need(d, "row", "line"), "row")
    get = row.get
    if table == "runs":
        record = rec.run_record_from_row(
            (0, 0, job, d.get("kind"), get("balance"), get("status"), get("peaks"),
             get("seconds"), get("samples_per_second"), get("error"), get("breakdown"),
             created, None, get("composed"), get("times"), get("estimated")),
            r.source, model.num_layers)
        run, kind = record.run, record.kind
    else:
        run = rec.stage_run_from_row(
            (0, get("balance"), get("stage"), get("status"), get("peak"), get("seconds"),
             get("times"), get("error"), get("breakdown")), r.source, model.num_layers)
        kind = None
    return {"table": table, "model": model, "setup": setup, "machine": machine,
            "created": created, "job": job, "run": run, "kind": kind}
