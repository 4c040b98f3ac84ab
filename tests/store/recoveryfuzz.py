"""Fuzzing the store's recovery file (issue 38, item 1): seeded mutations of a recovery file
and of what its path names (links to a victim, dangling links, hard links, FIFOs, folders,
files another user could have written, linked ``-wal`` / ``-shm`` / ``-journal``
neighbours, oversized files), each read by what every read-write command does first (the
store opened, its recovery file imported) and by an append (a measured run kept there).

Each case must end in a return or an ``McapError`` (exit 0 or 2), never another exception;
every victim keeps its bytes; a dangling link's target is never created; the secret planted
in the victims and in foreign lines is never printed; and a recovery file that is a regular
file of the user's keeps, byte for byte, every line that was not imported. Used by
tests/store/test_recovery_fuzz.py (a fast subset) and bench/bench_fuzz.py (>= 300)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sqlite3
import traceback
from pathlib import Path
from typing import Optional

from mcap.core.errors import McapError
from mcap.core.types import Layer, ModelInfo, Run, Setup, StageRun
from mcap.store import Store, recovery
from mcap.store.opening import NEIGHBOURS
from tests.io import fuzzing

SECRET = b"secret=hunter2"
MODEL = ModelInfo("toy:layers=4", tuple(Layer(f"l{i}", 100 * (i + 1)) for i in range(4)))
SETUP = Setup(stages=2, batch_size=4, chunks=2)
KINDS = ("lines", "lines", "lines", "foreign", "link", "link-valid", "dangling", "hardlink",
         "fifo", "folder", "shared", "owner", "neighbour", "big", "empty")


def _valid_line(rng: random.Random) -> bytes:
    created = 1.7e9 + rng.random() * 1e6
    if rng.random() < 0.7:
        first = rng.randint(1, 3)
        run = Run((first, 4 - first), rng.choice(("ok", "oom")), None, rng.random())
        if run.status == "ok":
            run = Run(run.balance, "ok", (rng.randint(1, 10**9), rng.randint(1, 10**9)),
                      run.seconds)
        line = recovery.run_line(MODEL, SETUP, run, kind="measure", job=None, machine=None,
                                 created=created)
    else:
        stage = StageRun((2, 2), rng.randint(0, 1), "ok", rng.randint(1, 10**9), rng.random())
        line = recovery.stage_line(MODEL, SETUP, stage, job=None, machine=None, created=created)
    return json.dumps(line, separators=(",", ":"), sort_keys=True).encode()


def _victim(rng: random.Random, valid: bool = False) -> bytes:
    """What a file the user cares about holds: a secret, CRs, blank lines, bad bytes (or a
    valid recovery file, which must not be imported through a link either)."""
    if valid:
        return b"\n".join(_valid_line(rng) for _ in range(3)) + b"\n"
    parts = [SECRET, b"line\r", b"", bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))]
    rng.shuffle(parts)
    return b"\n".join(parts) + rng.choice((b"\n", b"", b"\r\n"))


def _mutated_file(rng: random.Random) -> bytes:
    lines = []
    for _ in range(rng.randint(1, 6)):
        line = _valid_line(rng)
        roll = rng.random()
        if roll < 0.45:
            line = fuzzing.mutate(line.decode(), rng)
        elif roll < 0.55:
            line = SECRET + b" " + bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
        elif roll < 0.6:
            line = b""
        lines.append(line + rng.choice((b"\n", b"\n", b"\r\n", b"\n\n")))
    data = b"".join(lines)
    return data[:-1] if data and rng.random() < 0.2 else data


def _is_lines_removed(before: bytes, after: bytes) -> bool:
    """Whether ``after`` is ``before`` with some whole lines taken out (none changed)."""
    rest = after
    for line in recovery.split_lines(before):
        if rest.startswith(line) and line:
            rest = rest[len(line):]
    return rest == b""


def _store(folder: Path) -> Path:
    path = folder / "store.sqlite"
    Store(path).close()
    return path


def case(kind: str, rng: random.Random, folder: Path) -> tuple[Path, dict]:
    """Lay out one mutated case in ``folder``: (the store, what to check afterwards)."""
    store = _store(folder)
    target = recovery.path_of(store)
    victim = folder / "victim.txt"
    check: dict = {"victims": {}, "absent": [], "regular": None}
    if kind in ("link", "link-valid", "hardlink", "neighbour"):
        victim.write_bytes(_victim(rng, valid=kind == "link-valid"))
        check["victims"][victim] = victim.read_bytes()
    if kind == "lines" or kind == "shared" or kind == "owner":
        target.write_bytes(_mutated_file(rng))
        check["regular"] = target.read_bytes() if kind == "lines" else None
        if kind == "shared":
            check["victims"][target] = target.read_bytes()
            target.chmod(0o666)
        if kind == "owner":
            check["victims"][target] = target.read_bytes()
            if os.geteuid() == 0:
                os.chown(target, 12345, 12345)
            else:
                target.chmod(0o666)
    elif kind == "foreign":
        target.write_bytes(_victim(rng))
        check["regular"] = target.read_bytes()
    elif kind in ("link", "link-valid"):
        target.symlink_to(victim if rng.random() < 0.7 else os.path.relpath(victim, folder))
    elif kind == "dangling":
        ghost = folder / f"ghost-{rng.randrange(10**6)}"
        target.symlink_to(ghost)
        check["absent"].append(ghost)
    elif kind == "hardlink":
        os.link(victim, target)
    elif kind == "fifo":
        os.mkfifo(target)
    elif kind == "folder":
        target.mkdir()
        (target / "x").write_bytes(SECRET)
    elif kind == "neighbour":
        suffix = rng.choice(list(NEIGHBOURS))
        Path(f"{store}{suffix}").symlink_to(victim)
    elif kind == "big":
        with open(target, "wb") as fh:
            fh.write(_valid_line(rng) + b"\n")
            fh.truncate(recovery.MAX_RECOVERY_BYTES + rng.randint(1, 2**20))
    elif kind == "empty":
        target.write_bytes(b"")
    return store, check


def _run_count(store: Path) -> int:
    conn = sqlite3.connect(f"file:{store}?immutable=1", uri=True)  # touches no neighbour
    try:
        return conn.execute("SELECT (SELECT COUNT(*) FROM runs) + "
                            "(SELECT COUNT(*) FROM stage_runs)").fetchone()[0]
    finally:
        conn.close()


def read(store: Path, rng: random.Random) -> tuple[Optional[int], str, str, bool]:
    """What every read-write command does first (the store opened, the recovery file
    imported), or an append of a measured run: (0, 2 or None for another exception, what it
    printed, the traceback, whether it appended)."""
    err = io.StringIO()
    append = rng.random() >= 0.75
    try:
        with contextlib.redirect_stderr(err):
            if not append:
                Store(store).close()
            else:
                line = json.loads(_valid_line(rng))
                raise recovery.kept_or_explain(store, line, "the store was busy")
        return 0, err.getvalue(), "", append
    except McapError as exc:
        return 2, err.getvalue() + str(exc), "", append
    except Exception:  # noqa: BLE001 - a finding
        return None, err.getvalue(), traceback.format_exc(), append


def run(count: int, seed: int, folder: Path) -> tuple[dict, list[str], dict]:
    """``count`` cases: (tally of outcomes, findings, cases per kind)."""
    rng = random.Random(seed)
    tally, findings, per_kind = {}, [], {}
    for i in range(count):
        kind = KINDS[i % len(KINDS)] if i < len(KINDS) else rng.choice(KINDS)
        per_kind[kind] = per_kind.get(kind, 0) + 1
        where = folder / f"case{i}"
        where.mkdir()
        store, check = case(kind, rng, where)
        code, said, tb, appended = read(store, rng)
        tally[code] = tally.get(code, 0) + 1
        problems = [] if code is not None else [f"traceback: {tb.strip().splitlines()[-1]}"]
        for victim, before in check["victims"].items():
            if not victim.is_file() or victim.read_bytes() != before:
                problems.append(f"{victim.name} changed or removed")
        problems += [f"{p.name} was created" for p in check["absent"] if os.path.lexists(p)
                     and not os.path.islink(p)]
        if SECRET.decode() in said:
            problems.append("the secret was printed")
        if kind in ("link", "link-valid", "hardlink", "neighbour") and _run_count(store):
            problems.append("runs were imported through a link")
        target = recovery.path_of(store)
        if check["regular"] is not None:
            before = check["regular"]
            after = target.read_bytes() if target.exists() else b""
            kept = (after.startswith(before) and after.count(b"\n") ==
                    before.count(b"\n") + 1 + (bool(before) and not before.endswith(b"\n")))
            if not (kept if appended else _is_lines_removed(before, after)):
                problems.append("a line that was not imported changed" if not appended else
                                "the append changed what was there")
        if problems:
            findings.append(f"case {i} ({kind}): {'; '.join(problems)}")
    return tally, findings, per_kind
