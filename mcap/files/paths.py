"""Paths a person gives (``--out``, ``--store``, ``--profile``, ``$MCAP_STORE``, ...),
checked as text before any system call sees them (issue 38, item 3).

The system refuses a path longer than PATH_MAX (4,096 bytes with its NUL) or with one name
longer than NAME_MAX (255 bytes) with ``OSError: File name too long``, Python refuses a NUL
character with ``ValueError``, and ``Path("")`` is ``.``, the current folder: each reached
the user as a traceback or as a wrong message ("``.``: is a folder"). :func:`checked` says
which, naming the option and the path (cut, its length named).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Union

from mcap.core.errors import McapError

MAX_PATH_BYTES = 4095  # PATH_MAX less its NUL (Linux)
MAX_NAME_BYTES = 255   # NAME_MAX: one file or folder name
SHOWN_CHARS = 240      # a longer path echoed in a message is cut, its length named


class BadPath(McapError):
    """A path no file can have: empty, a NUL character, too long, not encodable."""


def shown(path) -> str:
    """``path`` for a message: repr'd; one longer than SHOWN_CHARS as its start and its end
    (the file's name) with its length named."""
    text = os.fsdecode(path) if isinstance(path, bytes) else str(path)
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:80]!r}...{text[-80:]!r} ({len(text):,} characters)"


def checked(path: Union[str, os.PathLike], what: str) -> Path:
    """``path`` as a Path, or BadPath naming ``what`` (``--out``, ``$MCAP_STORE``) and the
    path when no file can have it (module docstring)."""
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text.strip():
        raise BadPath(f"{what} is empty; give a file name")
    if "\x00" in text:
        raise BadPath(f"{what} {shown(text)} holds a NUL character, which no file name can hold")
    try:
        raw = os.fsencode(text)
    except UnicodeError:
        raise BadPath(f"{what} {shown(text)} holds characters this system cannot write in a "
                      "file name") from None
    if len(raw) > MAX_PATH_BYTES:
        raise BadPath(f"{what} {shown(text)} is {len(raw):,} bytes long, above the system's "
                      f"limit of {MAX_PATH_BYTES:,} bytes for a path")
    for name in raw.split(b"/"):
        if len(name) > MAX_NAME_BYTES:
            which = "" if name == raw else f" ({os.fsdecode(name)[:40]!r}...)"
            raise BadPath(f"{what} {shown(text)} has a name of {len(name):,} bytes{which}, "
                          f"above the system's limit of {MAX_NAME_BYTES} bytes for one file "
                          "or folder name")
    return Path(text)
