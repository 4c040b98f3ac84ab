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
(``mcap.store.records``, ``mcap.core.fields``); a line that fails them stays in the file
byte for byte and is named by its number and the reason, never by its content (issue 38:
a file that was not a recovery file had its lines printed), never executed or guessed at.
The file is one of the store's own (``mcap.files.owned``): a regular file of this user's,
never opened through a link, so a link planted there (``ln -s ~/.bashrc
S.recovery.jsonl``) is refused and its target left as it was. Appends and imports hold an
exclusive ``flock`` on the file, so two processes never interleave lines or import one twice.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional

from mcap.core import fields, numbers
from mcap.core.errors import McapError, StoreError
from mcap.files import owned
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
    value = numbers.real(text)  # ASCII digits only
    if value is None or not 0 <= value <= 7 * 86400:  # a run is at stake here: warn, never refuse
        print(f"mcap: warning: ${WAIT_ENV}={text[:40]!r} is not seconds between 0 and "
              f"604800; waiting {DEFAULT_WAIT_S:.0f} s", file=sys.stderr)
        return DEFAULT_WAIT_S
    return value


def check_wait() -> None:
    """McapError naming a bad ``$MCAP_STORE_WAIT`` (the command line asks before anything is
    measured; once a run is measured, :func:`wait_seconds` warns instead)."""
    text = os.environ.get(WAIT_ENV)
    if text is None:
        return
    value = numbers.real(text)  # ASCII digits only
    if value is None or not 0 <= value <= 7 * 86400:
        raise McapError(f"${WAIT_ENV}={text[:40]!r} is not seconds between 0 and 604800")


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


WHAT = "the store's recovery file"


@contextmanager
def _locked(path: Path, *, create: bool, append: bool = False) -> Iterator:
    """The file open under an exclusive flock: never through a link, only a regular file of
    this user's (``mcap.files.owned``); created when missing with ``create``, else
    FileNotFoundError. An import removes the file once it is empty; a process that was
    waiting for the lock then holds the removed file, so it opens the path again until the
    file it locked is the one the path names."""
    flags = os.O_RDWR | (os.O_CREAT if create else 0) | (os.O_APPEND if append else 0)
    while True:
        fd = owned.open_fd(path, flags, WHAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                same = os.lstat(path).st_ino == os.fstat(fd).st_ino
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
    """Append ``line`` to the store's recovery file (created when missing), fsynced. A file
    whose last line has no newline gets one first, so the two lines never run together."""
    path = path_of(store_path)
    data = (json.dumps(line, separators=(",", ":"), sort_keys=True) + "\n").encode()
    with _locked(path, create=True, append=True) as fd:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    return path


def kept_or_explain(store_path, line: dict, why: str) -> StoreError:
    """The StoreError a command raises when the store refused a measured run: ``line`` kept
    in the recovery file (named), or, if even that failed, said so with the run's values."""
    try:
        path = keep(store_path, line)
    except (OSError, owned.UnsafeFile) as exc:
        row = line["row"]
        return StoreError(f"{why}. The measured run could not be kept in "
                          f"{path_of(store_path)} either ({getattr(exc, 'strerror', None) or exc}); its values: "
                          f"balance {row['balance']}, status {row['status']}, peaks "
                          f"{row.get('peaks', row.get('peak'))}")
    return StoreError(f"{why}. The measured run was not lost: it is kept in {path}, which "
                      f"the next command that opens this store imports")


# --- importing ---------------------------------------------------------------------------

def pending(store_path) -> bool:
    """Whether the recovery file may hold lines (anything there but an empty file; a link
    or another kind of file is refused when it is opened, with its reason)."""
    try:
        return os.lstat(path_of(store_path)).st_size > 0
    except OSError:
        return False


def split_lines(data: bytes) -> list[bytes]:
    """The file's lines, each with its own bytes and its newline (the last may have none):
    ``b"".join`` of them is ``data`` again. Only a newline ends a line, as ``keep`` writes it."""
    parts = data.split(b"\n")
    out = [p + b"\n" for p in parts[:-1]]
    return out + [parts[-1]] if parts[-1] else out


def import_into(store, note: Callable[[str], None]) -> int:
    """Import the store's recovery file into ``store`` (open read-write) in one
    transaction; returns the runs imported. The lines not imported stay in the file byte for
    byte (a file nothing was imported from is not written at all) and are named through
    ``note`` by line number and reason, never by their content; a store still busy leaves
    the file for later. A link or a file that is not this user's own regular file is refused
    (``mcap.files.owned``), its bytes unchanged."""
    path = path_of(store.path)
    if not pending(store.path):
        return 0
    try:
        with _locked(path, create=False) as fd:
            size = os.fstat(fd).st_size
            if size > MAX_RECOVERY_BYTES:
                note(f"the recovery file {path} is {size:,} bytes, above the limit of "
                     f"{MAX_RECOVERY_BYTES:,}; it was not imported")
                return 0
            with os.fdopen(os.dup(fd), "rb") as fh:
                lines = split_lines(fh.read(MAX_RECOVERY_BYTES + 1))
            done, kept, problems = _import_lines(store, lines)
            if done is None:  # busy: try again next time
                return 0
            if len(kept) < len(lines):  # something was imported: the rest stays as it was
                rest = b"".join(lines[i] for i in kept)
                if rest.strip():
                    os.ftruncate(fd, 0)
                    os.pwrite(fd, rest, 0)
                    os.fsync(fd)
                else:
                    os.unlink(path)
    except FileNotFoundError:
        return 0
    except owned.UnsafeFile as exc:
        note(f"the recovery file was not imported: {exc}")
        return 0
    except OSError as exc:
        note(f"cannot import the recovery file {path}: {exc.strerror or exc}")
        return 0
    if done:
        note(f"imported {done} measured run{'' if done == 1 else 's'} kept in {path} while "
             f"the store was busy")
    for line_no, problem in problems:
        note(f"{path} line {line_no} was not imported and stays in the file: {problem}")
    return done


_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


def _blind(text: str) -> str:
    """A refusal of a line without any value it found: cut at "found", quoted texts left out
    (a line of the recovery file is reported by number and reason, never by its content)."""
    head = text.split(", found ")[0].split(" found ")[0]
    if " is out of range " in head:
        head = head.rsplit(": ", 1)[0] + ": out of range " + head.split(" is out of range ", 1)[1]
    return _QUOTED.sub("'...'", head)[:300]


def _line_problem(text: bytes, n: int):
    """(the decoded record, None) or (None, why line ``n`` cannot be one)."""
    try:
        line = text.decode("utf-8")
    except UnicodeDecodeError:
        return None, "it is not UTF-8 text"
    r = fields.Reader(f"recovery line {n}", StoreError)
    if fields.too_deep(line):
        return None, "it is not JSON (nested too deep)"
    try:
        d = json.loads(line)
    except (ValueError, RecursionError):
        return None, "it is not JSON"
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        return None, f"it is not an {SCHEMA} record"
    try:
        return _decode(d, r), None
    except McapError as exc:
        return None, f"it is an {SCHEMA} record that fails a check: {_blind(str(exc))}"


def _import_lines(store, lines: list[bytes]):
    """(runs imported or None when the store is busy, indexes of the lines kept, problems
    as (line number, why)). A blank line is kept where it is, and not reported."""
    kept, problems, parsed = [], [], []
    for i, text in enumerate(lines):
        if not text.strip():
            kept.append(i)
            continue
        item, why = _line_problem(text, i + 1)
        if item is None:
            kept.append(i)
            problems.append((i + 1, why))
        else:
            parsed.append((i, item))
    if not parsed:
        return 0, kept, problems
    try:
        done, refused = store._import_recovered([item for _, item in parsed])
    except StoreError as exc:
        if busy(exc):
            return None, kept, problems
        raise
    for (i, _), why in zip(parsed, refused):
        if why is not None:
            kept.append(i)
            problems.append((i + 1, f"the store refused it: {why}"))
    return done, sorted(kept), sorted(problems)


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
            r.source, rec.StudyShape(model.num_layers, setup.virtual_stages))
        run, kind = record.run, record.kind
    else:
        run = rec.stage_run_from_row(
            (0, get("balance"), get("stage"), get("status"), get("peak"), get("seconds"),
             get("times"), get("error"), get("breakdown")), r.source,
            rec.StudyShape(model.num_layers, setup.virtual_stages))
        kind = None
    return {"table": table, "model": model, "setup": setup, "machine": machine,
            "created": created, "job": job, "run": run, "kind": kind}
