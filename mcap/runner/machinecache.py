"""What mcap measures about the machine itself, kept on disk for a day (issue 25, item 2),
and the helper processes that measure it (:func:`run_processes`).

A throughput estimated from stages run alone needs two things about the machine that cost
fresh processes to measure: the link between stage processes (``mcap.runner.link``) and how
much slower a stage computes while others compute beside it (``mcap.runner.corun``). They
are measured once and kept in ``machine.json`` in ``$MCAP_CACHE_DIR`` (default
``~/.cache/mcap``; the value ``off`` keeps nothing on disk), each entry under a key that
names what it belongs to (:func:`machine_key`: the host, its CPU and usable cores, the torch
build, and whatever the caller adds) and measured at most :data:`MAX_AGE_S` ago.

The file is data: it is read as JSON, each entry is checked by its caller's ``valid`` (so
only numbers and texts of the expected shape are used), an entry that is not well formed is
skipped, and the file is replaced whole (written beside and renamed). A broken, foreign or
unwritable file costs one measurement, never a failed run. A file that is a link, or that
another user could have written, is not read (``mcap.files.owned``).

The folder is the cache's own (issue 38: ``MCAP_CACHE_DIR=/`` wrote ``/machine.json``
without a word): a folder of the user's, not a link, holding nothing but mcap's files
(:data:`OWN_NAMES`), created when missing. Any other folder is refused: :func:`check_folder`
raises (the command line checks it before a command runs, ``mcap.cli.environment``), and a
measurement under it keeps nothing and says why once.
"""
from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Optional, Sequence

from mcap.core.errors import McapError
from mcap.files import owned, paths
from mcap.runner.heap import MALLOC_ENV

CACHE_ENV = "MCAP_CACHE_DIR"
CACHE_FILE = "machine.json"
MAX_AGE_S = 24 * 3600.0  # measured longer ago: measured again
MAX_ENTRIES = 64  # per section; the oldest go first
MAX_BYTES = 1 << 20  # a larger file is not ours: ignored, then replaced
# What mcap keeps in its cache folder: this file (and its temporaries, ``.machine*``) and,
# for an installed mcap, memtrack's compiled extension (``mcap.runner.memtrack``).
OWN_NAMES = (CACHE_FILE, "torch_extensions")
_warned: set = set()


def cache_file() -> Optional[Path]:
    """Where measurements of the machine are kept; None when ``$MCAP_CACHE_DIR`` is ``off``."""
    text = os.environ.get(CACHE_ENV, "").strip()
    if text.lower() == "off":
        return None
    base = Path(text).expanduser() if text else Path.home() / ".cache" / "mcap"
    return base / CACHE_FILE


def problem() -> Optional[str]:
    """Why the cache's folder cannot be used (module docstring), or None (also for off)."""
    text = os.environ.get(CACHE_ENV, "").strip()
    if text.lower() == "off":
        return None
    try:
        if text:
            paths.checked(text, f"${CACHE_ENV}")
        path = cache_file()
        st = os.lstat(path.parent)
    except paths.BadPath as exc:
        return str(exc)
    except (FileNotFoundError, NotADirectoryError):
        return None  # created when first written (a file in the way: the write says so)
    except OSError as exc:
        return f"{path.parent} cannot be used: {exc.strerror or exc}"
    why = owned.folder_problem(st)
    if why is not None:
        return f"{path.parent} {why}"
    foreign = []
    try:
        with os.scandir(path.parent) as entries:
            for e in entries:
                if e.name not in OWN_NAMES and not e.name.startswith(".machine"):
                    foreign.append(e.name)
                    if len(foreign) > 5:
                        break
    except OSError as exc:
        return f"{path.parent} cannot be listed: {exc.strerror or exc}"
    if foreign:
        shown = ", ".join(sorted(foreign)[:5]) + (", ..." if len(foreign) > 5 else "")
        return (f"{path.parent} holds files that are not mcap's ({shown}); the machine cache "
                f"keeps {CACHE_FILE} only in a folder of its own")
    return None


def check_folder() -> None:
    """McapError naming ``$MCAP_CACHE_DIR`` when the cache's folder cannot be used."""
    why = problem()
    if why is not None:
        raise McapError(f"${CACHE_ENV}={os.environ.get(CACHE_ENV, '')[:200]!r}: {why}. Give a "
                        "new or empty folder of yours, or off to keep nothing")


def _usable() -> Optional[Path]:
    """The cache file, or None when off or refused (said once per process and reason)."""
    path = cache_file()
    if path is None:
        return None
    why = problem()
    if why is not None:
        if why not in _warned:
            _warned.add(why)
            print(f"mcap: warning: ${CACHE_ENV}: {why}; the machine's measurements are not "
                  "kept (give a new or empty folder of yours, or off)", file=sys.stderr)
        return None
    return path


def machine_key(**more) -> str:
    """This host, its CPU and usable cores and the torch build, plus ``more`` (what the
    measurement also depends on), as one stable text."""
    from mcap.runner.machine import cpu_model
    try:
        from importlib.metadata import version
        torch_version = version("torch")
    except Exception:  # pragma: no cover (torch importable without its metadata)
        torch_version = "unknown"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    # The helpers run with malloc's thresholds fixed (heap.MALLOC_ENV); what was measured
    # without them (before 2026-11-26, session 6) is measured again.
    parts = {"host": platform.node(), "cpu": cpu_model(), "cores": cores,
             "torch": torch_version, "malloc": MALLOC_ENV, **more}
    return json.dumps(parts, sort_keys=True, separators=(",", ":"))


def finite(x) -> bool:
    """A JSON number (not a boolean) that is finite."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _doc(path: Path) -> dict:
    """The file's document; {} for anything but a regular file of at most MAX_BYTES of JSON."""
    try:
        if not owned.check(path, "the machine cache"):  # a link, another user's: not read
            return {}
        fd = owned.open_fd(path, os.O_RDONLY, "the machine cache")
        with os.fdopen(fd, encoding="utf-8") as fh:
            text = fh.read(MAX_BYTES + 1)
        if len(text) > MAX_BYTES:
            return {}
        doc = json.loads(text)
    except (OSError, ValueError, RecursionError, owned.UnsafeFile):
        return {}
    return doc if isinstance(doc, dict) and doc.get("version") == 1 else {}


def _entries(doc: dict, section: str, valid: Callable[[dict], bool]) -> list:
    found = doc.get(section)
    if not isinstance(found, list):
        return []
    out = []
    for e in found:
        if (isinstance(e, dict) and isinstance(e.get("key"), str) and finite(e.get("measured_at"))
                and isinstance(e.get("value"), dict)):
            try:
                ok = valid(e["value"])
            except Exception:  # a value of an unexpected shape is not an entry
                ok = False
            if ok:
                out.append(e)
    return out


def read(section: str, key: str, valid: Callable[[dict], bool],
         now: Optional[float] = None) -> Optional[dict]:
    """The value kept under ``section`` for ``key`` if ``valid`` and measured within
    :data:`MAX_AGE_S` of ``now``, else None."""
    path = _usable()
    if path is None:
        return None
    now = time.time() if now is None else now
    for e in _entries(_doc(path), section, valid):
        if e["key"] == key and 0 <= now - e["measured_at"] <= MAX_AGE_S:
            return e["value"]
    return None


def write(section: str, key: str, value: dict, valid: Callable[[dict], bool]) -> None:
    """Keep ``value`` under ``section`` for ``key`` (replacing its older entry, keeping the
    other sections' well-formed entries); skipped when the file cannot be written."""
    path = _usable()
    if path is None:
        return
    doc = _doc(path)
    out = {"version": 1}
    for name in {k for k, v in doc.items() if isinstance(v, list)} | {section}:
        kept = _entries(doc, name, valid if name == section else (lambda v: True))
        if name == section:
            kept = [e for e in kept if e["key"] != key]
            kept.append({"key": key, "measured_at": time.time(), "value": value,
                         "load": os.getloadavg()[0] if hasattr(os, "getloadavg") else None})
        out[name] = kept[-MAX_ENTRIES:]
    try:  # the folder is mcap's own (checked above): a link there is replaced, never followed
        owned.folder(path.parent, f"${CACHE_ENV}")
        owned.replace(path, json.dumps(out, indent=1), "the machine cache", over_link=True)
    except (OSError, owned.UnsafeFile):
        pass


_REPO = Path(__file__).resolve().parent.parent.parent


def run_processes(module: str, argvs: Sequence[Sequence[str]], env: dict, timeout: float,
                  what: str) -> list[str]:
    """Start ``python -m module *argv`` once per argv, all at once, with this repository
    importable and ``env`` added; their standard outputs, in order. One that fails or a
    group that outlasts ``timeout`` seconds kills them all and raises McapError naming
    ``what`` (and the failed one's last line of standard error)."""
    full = dict(os.environ)
    full["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), full.get("PYTHONPATH", "")) if p)
    full.update(env)
    procs = [subprocess.Popen([sys.executable, "-m", module, *map(str, argv)], cwd=str(_REPO),
                              env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for argv in argvs]
    outs = []
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            try:
                out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise McapError(f"{what} took over {timeout:g} s") from None
            if p.returncode != 0:
                tail = (err.strip().splitlines() or ["no message"])[-1]
                raise McapError(f"{what} failed: {tail}")
            outs.append(out)
    finally:
        for q in procs:
            if q.poll() is None:
                q.kill()
                q.wait()
    return outs
