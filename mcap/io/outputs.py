"""``--out`` files: checked before any run starts, written atomically (issue 12).

A command that writes ``--out FILE`` calls ``check_out`` before it measures anything. It
exits 2 naming the path when the path is

* the results store or one of its ``-wal`` / ``-shm`` / ``-journal`` files,
* a file the same command reads (``--profile``, ``--sweep``),
* a folder, or a place that cannot be written (read-only, under a file, no permission),
* an existing file that is not an mcap JSON document of the schema being written.

An existing file of the same schema (an earlier result of the same command) is replaced:
re-running a command refreshes its result, and the runs behind both are in the store.
``write_text`` replaces the file atomically (temp file in the same folder, fsync, rename),
so a crash or a full disk never leaves half a file, and ``rescue_hint`` says how to write
the file again from the store when the final write fails after the runs.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Iterable, Optional, Union

from mcap.core.errors import McapError
from mcap.files import owned, paths
from mcap.store.opening import NEIGHBOURS

STORE_SIDECARS = ("", *NEIGHBOURS)  # the store and the files beside it
# An existing file larger than this is not read to learn its schema: no mcap JSON is.
MAX_SCHEMA_PROBE_BYTES = 256 * 2**20


class OutputError(McapError):
    """An ``--out`` path that would destroy data or cannot be written."""


def _same(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode when both exist, else the same
    resolved real path (symlinked folders and a dangling symlink resolved: ``DIR_LINK/x``
    and ``REAL_DIR/x`` are one file before either exists, issue 28)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def _existing_ancestor(p: Path) -> Path:
    q = p.parent
    while not q.exists() and q != q.parent:
        q = q.parent
    return q


def _schema_of(p: Path) -> Optional[str]:
    from mcap.io.jsonio import read_json
    try:
        d = read_json(p, limit=MAX_SCHEMA_PROBE_BYTES)
    except McapError:
        return None
    return d.get("schema") if isinstance(d, dict) and isinstance(d.get("schema"), str) else None


def check_out(out: Union[str, Path], schema: str, *, store: Union[str, Path, None] = None,
              inputs: Iterable[Union[str, Path]] = (), flag: str = "--out") -> Path:
    """Raise ``OutputError`` naming ``out`` unless writing ``schema`` there is safe; see the
    module docstring. Creates nothing (the write probe is removed)."""
    if str(out).strip() == "":  # argparse's --out type refuses it before Path("") is "."
        raise OutputError(f"{flag} is empty; give a file name such as result.json")
    try:  # too long, a NUL: os.stat would raise (issue 38)
        p = paths.checked(out, flag)
    except paths.BadPath as exc:
        raise OutputError(str(exc)) from None
    if store is not None:
        for suffix in STORE_SIDECARS:
            if _same(p, Path(f"{store}{suffix}")):
                raise OutputError(f"{flag} {p} is the results store{' ' + suffix[1:] + ' file' if suffix else ''} "
                                  f"({store}); writing there would destroy every stored run. "
                                  f"Choose another file")
    for inp in inputs:
        if inp is not None and _same(p, Path(inp)):
            raise OutputError(f"{flag} {p} is also an input of this command ({inp}); "
                              f"choose another file")
    if p.is_dir():
        raise OutputError(f"{flag} {p} is a folder; give a file name inside it")
    try:  # a link (never written through or over), a FIFO, another user's file (issue 38)
        exists = owned.check(p, flag)
    except owned.UnsafeFile as exc:
        raise OutputError(str(exc)) from None
    if exists:
        found = _schema_of(p)
        if found != schema:
            what = f"an mcap file of schema {found!r}" if found else "not an mcap JSON file"
            raise OutputError(f"{flag} {p} exists and is {what}; it would be replaced by a "
                              f"{schema} file. Move it away or choose another file (only a "
                              f"{schema} file is overwritten)")
        if not os.access(p, os.W_OK):
            raise OutputError(f"{flag} {p} exists and cannot be written (permission denied)")
    base = _existing_ancestor(p)
    if not base.is_dir():
        raise OutputError(f"{flag} {p}: {base} is a file, not a folder")
    _probe(p, base, flag)
    return p


def _probe(p: Path, base: Path, flag: str) -> None:
    """Create and remove a temp file where the output will go (root ignores modes, and a
    read-only mount or a full quota only shows on a real write)."""
    where = p.parent if p.parent.is_dir() else base
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=where)
    except OSError as exc:
        raise OutputError(f"{flag} {p} cannot be written: {exc.strerror or exc} ({where})") from None
    os.close(fd)
    os.unlink(tmp)


def write_text(path: Union[str, Path], text: str, flag: str = "--out") -> Path:
    """Replace ``path`` with ``text`` atomically (``mcap.files.owned.replace``: temp file
    beside it, fsync, rename; never over a link or another user's file); its folder is
    created when missing (``--out out/p.json`` in a fresh checkout)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    try:
        return owned.replace(path, text, flag)
    except owned.UnsafeFile as exc:
        raise OutputError(str(exc)) from None


def rescue_hint(kind: str, stored_id: int, store: Union[str, Path], out: Union[str, Path]) -> str:
    """The command that writes a stored profile or sweep to a file again."""
    return (f"python -m mcap export --store {store} --{kind} {stored_id} --out {out}")


def write_checked(out: Union[str, Path], text: str, schema: str, *,
                  store: Union[str, Path, None] = None,
                  inputs: Iterable[Union[str, Path]] = (), flag: str = "--out") -> Path:
    """``check_out`` again, right before the write, then ``write_text``: what was checked
    before the runs may have changed since (the store created meanwhile behind a symlinked
    folder, a file of another kind put there), so the check that counts is this one."""
    check_out(out, schema, store=store, inputs=inputs, flag=flag)
    return write_text(out, text)


def write_or_explain(obj, out: Union[str, Path], kind: str, stored_id: int,
                     store: Union[str, Path]) -> Path:
    """Write a Profile or Sweep to ``out`` (checked again first, :func:`write_checked`); if
    that fails after the runs, raise an McapError saying the result is in the store and how
    to write it again."""
    from mcap.io import jsonio
    text = jsonio.dumps(obj)
    try:
        return write_checked(out, text, f"mcap.{kind}/1", store=store)
    except OutputError as exc:
        raise OutputError(f"{exc}. Nothing was written; the runs and the {kind} are kept in "
                          f"the store ({kind} id {stored_id}); write the file elsewhere with: "
                          f"{rescue_hint(kind, stored_id, store, 'FILE.json')}") from None
    except OSError as exc:
        raise OutputError(f"could not write {out}: {exc.strerror or exc}. The runs and the {kind} "
                          f"are kept in the store ({kind} id {stored_id}); write the file again "
                          f"with: {rescue_hint(kind, stored_id, store, out)}") from None
