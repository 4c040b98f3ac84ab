"""Opening a file mcap writes: never through a link, only a regular file of the user's
(issue 38, item 1).

A store's recovery file that was a symbolic link to another file was opened with
``O_RDWR | O_CREAT`` through the link, rewritten and its lines printed; a cloned repository
could ship one pointing at any file its user can write. Every file mcap writes therefore
passes one test (:func:`problem`), the rules the store keeps for itself:

* it is a **regular file** (not a folder, a FIFO, a device or a socket);
* it is **not a symbolic link**: a link is refused, never followed (``O_NOFOLLOW`` where the
  file is opened, ``lstat`` where it is checked), never replaced;
* it has **one name** (a hard link is another name for a file elsewhere);
* it is **owned by the user running mcap** and **not writable by every user** (one another
  user could have put there).

A file that does not exist yet is created by mcap itself (never world-writable). Whatever
fails the test is refused with :class:`UnsafeFile` (an ``McapError``: the CLI exits 2, a page
shows ``st.error``) naming the file, what it is and what to do; its bytes stay as they were.
Folders mcap creates files in (``jobs/`` and ``out/`` beside a store, the machine cache)
pass :func:`folder`'s version of the test. :func:`open_fd` opens, :func:`replace` replaces a
file whole (temp file beside it, fsync, rename), :func:`check` only looks.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import Optional, Union

from mcap.core.errors import McapError
from mcap.files.paths import shown

PathLike = Union[str, os.PathLike]


class UnsafeFile(McapError):
    """A file (or folder) mcap would write that is a link, not a regular file, another
    user's or writable by every user: refused, left as it was."""


def kind(mode: int) -> str:
    for test, name in ((stat.S_ISREG, "a regular file"),
                       (stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def problem(st: os.stat_result, *, owner: bool = True) -> Optional[str]:
    """Why a file with this ``lstat``/``fstat`` result is not one mcap may write (module
    docstring), or None. ``owner=False`` leaves out the two ownership rules (a file only
    read, such as another user's store opened read-only)."""
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return f"is {kind(st.st_mode)}, not a regular file"
    if st.st_nlink > 1:
        return (f"has {st.st_nlink} hard links (other names for the same file, which may be "
                "anywhere on this file system)")
    if owner and st.st_uid != os.geteuid():
        return f"is owned by user id {st.st_uid}, not by you (user id {os.geteuid()})"
    if owner and st.st_mode & stat.S_IWOTH:
        return f"can be written by every user (mode {stat.filemode(st.st_mode)})"
    return None


def _refusal(path: PathLike, what: str, why: str) -> UnsafeFile:
    target = ""
    if why.startswith("is a symbolic link"):
        try:
            target = f" (to {shown(os.readlink(path))})"
        except OSError:
            pass
    return UnsafeFile(f"{what} {shown(path)} {why}{target}; mcap writes only regular files "
                      "of its own user and never through a link, so nothing was changed. "
                      "Remove it (or give another path)")


def check(path: PathLike, what: str, *, owner: bool = True) -> bool:
    """Whether ``path`` exists; UnsafeFile when it exists and fails the test (a symbolic link,
    dangling or not, is refused). Follows no link."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # nothing there (or no folder to hold it)
        return False
    except OSError as exc:
        raise UnsafeFile(f"cannot use {what} {shown(path)}: {exc.strerror or exc}") from None
    why = problem(st, owner=owner)
    if why is not None:
        raise _refusal(path, what, why)
    return True


def new_mode(base: int = 0o666) -> int:
    """``base`` less the process's umask and never writable by every user."""
    umask = os.umask(0)
    os.umask(umask)
    return base & ~umask & ~stat.S_IWOTH


def open_fd(path: PathLike, flags: int, what: str, *, owner: bool = True) -> int:
    """``os.open(path, flags)`` that never follows a link and returns only a file that passes
    the test (checked on the open file, so nothing can be swapped in between); a file it
    creates is never writable by every user. ``O_TRUNC`` is applied after the test, so a
    refused file keeps its bytes. OSError for what the system refuses (no folder, no
    permission), UnsafeFile for what mcap refuses."""
    truncate = bool(flags & os.O_TRUNC)
    flags = (flags & ~os.O_TRUNC) | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags, new_mode())
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link (a dangling one too)
            raise _refusal(path, what, "is a symbolic link") from None
        if exc.errno in (errno.ENXIO, errno.EISDIR, errno.ENODEV):  # FIFO, folder, device
            check(path, what, owner=owner)
        raise
    try:
        why = problem(os.fstat(fd), owner=owner)
        if why is not None:
            raise _refusal(path, what, why)
        os.set_blocking(fd, True)
        if truncate:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def replace(path: PathLike, data: Union[bytes, str], what: str, *,
            over_link: bool = False) -> Path:
    """Replace ``path`` with ``data`` whole: a temp file in the same folder, fsynced, renamed
    over it, so a crash or a full disk never leaves half a file. The file there must pass
    the test first; ``over_link``: a link there is replaced itself (never followed), for a
    folder that is mcap's own (the machine cache)."""
    path = Path(path)
    if over_link:
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                raise UnsafeFile(f"{what} {shown(path)} is a folder, not a file")
        except FileNotFoundError:
            pass
    else:
        check(path, what)
    if isinstance(data, str):
        data = data.encode("utf-8")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:200]}.", suffix=".tmp",
                               dir=str(path.parent))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fchmod(fh.fileno(), new_mode())  # mkstemp makes 0600
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def folder_problem(st: os.stat_result) -> Optional[str]:
    """Why a folder with this ``lstat`` result is not one mcap creates files in, or None."""
    if not stat.S_ISDIR(st.st_mode):
        return f"is {kind(st.st_mode)}, not a folder"
    if st.st_uid != os.geteuid():
        return f"is owned by user id {st.st_uid}, not by you (user id {os.geteuid()})"
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        return f"can be written by every user (mode {stat.filemode(st.st_mode)})"
    return None


def folder(path: PathLike, what: str, *, create: bool = True) -> Path:
    """``path``, a folder of the user's that mcap may create files in (created with its
    parents when missing and ``create``); UnsafeFile when it is a link, not a folder,
    another user's or writable by every user (without the sticky bit)."""
    path = Path(path)
    try:
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            if not create:
                raise UnsafeFile(f"{what} {shown(path)} does not exist") from None
            os.makedirs(path, mode=0o775, exist_ok=True)  # the umask applies too
            st = os.lstat(path)
    except OSError as exc:  # a file where a parent folder should be, no permission
        raise UnsafeFile(f"cannot create {what} {shown(path)}: {exc.strerror or exc}") from None
    why = folder_problem(st)
    if why is not None:
        raise UnsafeFile(f"{what} {shown(path)} {why}; mcap creates files only in folders of "
                         "its own user, never through a link. Give another folder")
    return path
