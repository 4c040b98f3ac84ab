"""The Slurm executor's ledger (``ledger.jsonl`` in ``--slurm-folder``): one JSON line per
job a driver sent, saying what it measures (``content``, a hash of model, setup and task), its
Slurm job id, the model and setup it belongs to (``sweep``) and the driver that sent it
(``owner``, ``host:pid``). A driver killed mid-sweep and run again reads it to adopt its
jobs instead of sending them twice (``mcap.runner.executors.slurm``).

The ledger is data: a line is read as four strings, and a job id that is not Slurm's own
form (``123`` or ``123_4``) is skipped, since job ids name the folders a driver deletes. The
file is opened only as a regular file of the user's, never through a link
(``mcap.files.owned``): a link or another user's file there is refused with the file named,
and its bytes stay as they were.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import socket
from pathlib import Path
from typing import Iterable, NamedTuple, Optional

from mcap.files import owned

WHAT = "the Slurm executor's ledger"
OWNER = f"{socket.gethostname()}:{os.getpid()}"  # this driver
_JOB_ID = re.compile(r"\d+(_\d+)?")  # a job, or a task of an array


class Entry(NamedTuple):
    job: str
    sweep: Optional[str]  # None on a line an older mcap wrote
    owner: Optional[str]


def gone(owner: Optional[str]) -> bool:
    """Whether the driver ``host:pid`` has ended (one on another host is taken as running)."""
    host, _, pid = str(owner or "").rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


class Ledger:
    def __init__(self, path: Path):
        self.path = Path(path)

    def exists(self) -> bool:
        """Whether there is a ledger; UnsafeFile when what is there is not one to write."""
        return owned.check(self.path, WHAT)

    def entries(self) -> dict[str, Entry]:
        """{content: Entry} of every well-formed line (a later line of a content wins)."""
        if not self.exists():
            return {}
        with os.fdopen(owned.open_fd(self.path, os.O_RDONLY, WHAT), encoding="utf-8",
                       errors="replace") as fh:
            lines = fh.read().splitlines()
        out = {}
        for line in lines:
            d = _parse(line)
            if d is not None:
                out[d["content"]] = Entry(d["job"], d.get("sweep"), d.get("owner"))
        return out

    def add(self, rows: Iterable[tuple[str, str]], sweep: str) -> None:
        """Append ``(content, job id)`` lines sent by this driver for ``sweep``."""
        fd = owned.open_fd(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, WHAT)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            for content, job in rows:
                fh.write(json.dumps({"content": content, "job": job, "sweep": sweep,
                                     "owner": OWNER}) + "\n")

    def drop(self, ids: set) -> None:
        """Take the lines of these job ids out (the file goes when none is left); lines this
        reader cannot parse stay as they were."""
        if not ids or not self.exists():
            return
        with os.fdopen(owned.open_fd(self.path, os.O_RDWR, WHAT), "r+", encoding="utf-8",
                       errors="surrogateescape") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            keep = [line for line in fh.read().splitlines()
                    if line.strip() and (_parse(line) or {}).get("job") not in ids]
            fh.seek(0)
            fh.truncate()
            fh.write("".join(line + "\n" for line in keep))
        if not keep:
            self.path.unlink(missing_ok=True)


def _parse(line: str) -> Optional[dict]:
    """A line's fields as strings (sweep and owner may be None), or None when it is not a
    ledger line or its job id is not Slurm's."""
    try:
        d = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(d, dict):
        return None
    fields = {k: d.get(k) for k in ("content", "job", "sweep", "owner")}
    if not all(isinstance(v, str) for k, v in fields.items() if k in ("content", "job")) or \
            not all(v is None or isinstance(v, str) for v in fields.values()):
        return None
    if not _JOB_ID.fullmatch(fields["job"]):
        return None
    return fields
