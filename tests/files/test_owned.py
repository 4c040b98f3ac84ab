"""The one test every file mcap writes passes (issue 38, item 1): a regular file of the
user's, never opened through a link; refused files keep their bytes."""
from __future__ import annotations

import os
import stat

import pytest

from mcap.files import owned, paths

VICTIM = b"line1\r\n\nsecret=hunter2\n\xff\xfe bad bytes\n"


@pytest.fixture
def victim(tmp_path):
    path = tmp_path / "victim.txt"
    path.write_bytes(VICTIM)
    return path


def test_a_link_is_refused_never_followed(tmp_path, victim):
    link = tmp_path / "f"
    link.symlink_to(victim)
    for flags in (os.O_RDWR, os.O_RDWR | os.O_CREAT, os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                  os.O_RDWR | os.O_APPEND):
        with pytest.raises(owned.UnsafeFile, match="is a symbolic link.*victim.txt"):
            owned.open_fd(link, flags, "the file")
    with pytest.raises(owned.UnsafeFile, match="symbolic link"):
        owned.replace(link, "new", "--out")
    assert victim.read_bytes() == VICTIM and link.is_symlink()


def test_a_dangling_link_creates_nothing_where_it_points(tmp_path):
    link = tmp_path / "f"
    link.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(owned.UnsafeFile, match="symbolic link"):
        owned.open_fd(link, os.O_RDWR | os.O_CREAT, "the file")
    assert not (tmp_path / "elsewhere").exists()


def test_a_hard_link_a_fifo_and_a_folder_are_refused(tmp_path, victim):
    hard = tmp_path / "hard"
    os.link(victim, hard)
    with pytest.raises(owned.UnsafeFile, match="2 hard links"):
        owned.open_fd(hard, os.O_WRONLY | os.O_TRUNC, "the file")
    assert victim.read_bytes() == VICTIM  # O_TRUNC only after the test
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(owned.UnsafeFile, match="FIFO"):
        owned.open_fd(fifo, os.O_WRONLY | os.O_CREAT, "the file")
    with pytest.raises(owned.UnsafeFile, match="a folder"):
        owned.check(tmp_path, "the file")


def test_a_file_every_user_may_write_or_of_another_user_is_refused(tmp_path, victim, monkeypatch):
    victim.chmod(0o666)
    with pytest.raises(owned.UnsafeFile, match="written by every user"):
        owned.check(victim, "the file")
    victim.chmod(0o644)
    assert owned.check(victim, "the file")
    monkeypatch.setattr(os, "geteuid", lambda: os.stat(victim).st_uid + 1)
    with pytest.raises(owned.UnsafeFile, match="owned by user id"):
        owned.check(victim, "the file")
    assert owned.check(victim, "the file", owner=False)  # read only: the owner may differ


def test_created_and_replaced_files_are_never_writable_by_every_user(tmp_path):
    old = os.umask(0)
    try:
        fd = owned.open_fd(tmp_path / "new", os.O_RDWR | os.O_CREAT, "the file")
        os.close(fd)
        owned.replace(tmp_path / "out.json", "{}", "--out")
    finally:
        os.umask(old)
    for name in ("new", "out.json"):
        assert not os.stat(tmp_path / name).st_mode & stat.S_IWOTH
    assert (tmp_path / "out.json").read_text() == "{}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new", "out.json"]  # no temp left


def test_replace_over_a_link_in_a_folder_of_its_own_replaces_the_link(tmp_path, victim):
    link = tmp_path / "machine.json"
    link.symlink_to(victim)
    owned.replace(link, "{}", "the cache", over_link=True)
    assert not link.is_symlink() and link.read_text() == "{}" and victim.read_bytes() == VICTIM


def test_folders(tmp_path, monkeypatch):
    made = owned.folder(tmp_path / "a" / "jobs", "the jobs folder")
    assert made.is_dir()
    (tmp_path / "link").symlink_to(tmp_path / "a", target_is_directory=True)
    with pytest.raises(owned.UnsafeFile, match="symbolic link"):
        owned.folder(tmp_path / "link", "the jobs folder")
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(owned.UnsafeFile, match="every user"):
        owned.folder(open_to_all, "the jobs folder")
    open_to_all.chmod(0o1777)  # sticky, as /tmp: others cannot replace what is ours
    assert owned.folder(open_to_all, "the jobs folder")


@pytest.mark.parametrize("text,needle", [
    ("", "is empty"),
    ("   ", "is empty"),
    ("a\x00b", "NUL character"),
    ("x" * 300 + ".json", "name of 305 bytes"),
    ("/".join(["y" * 200] * 25), "5,024 bytes long, above the system's limit of 4,095"),
    ("\udcff\ud800", "cannot write in a file name"),
])
def test_paths_no_file_can_have_are_named(text, needle):
    with pytest.raises(paths.BadPath, match=needle) as caught:
        paths.checked(text, "--out")
    assert str(caught.value).startswith("--out") and len(str(caught.value)) < 400
