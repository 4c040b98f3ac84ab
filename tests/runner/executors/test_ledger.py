"""The Slurm executor's ledger (``mcap.runner.executors.ledger``) as hostile data: job ids
name the folders a driver deletes, so one that is not Slurm's is never read; a link or a
non-regular file where the ledger goes is refused, its bytes kept; malformed lines are
skipped, never dropped."""
from __future__ import annotations

import json
import os

import pytest

from mcap.files.owned import UnsafeFile
from mcap.runner.executors import ledger as ledger_mod
from mcap.runner.executors.ledger import Ledger


def _write(path, lines):
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))


def test_lines_round_trip_and_only_slurm_job_ids_are_read(tmp_path):
    led = Ledger(tmp_path / "ledger.jsonl")
    led.add([("a", "12_0"), ("b", "12_1")], "sweep1")
    deep = "[" * 200_000 + "]" * 200_000
    with open(led.path, "a") as fh:  # what another hand put there
        for line in (json.dumps({"content": "c", "job": "../../outside"}),
                     json.dumps({"content": "d", "job": "/etc"}),
                     json.dumps({"content": "e", "job": 13}),
                     json.dumps({"content": "f", "job": "14", "owner": ["x"]}),
                     json.dumps([1, 2]), deep, "NaN", "1e400", "not json",
                     json.dumps({"content": "g", "job": "15"})):
            fh.write(line + "\n")
    got = led.entries()
    assert set(got) == {"a", "b", "g"}
    assert got["a"] == ("12_0", "sweep1", ledger_mod.OWNER)
    assert got["g"] == ("15", None, None)  # an older mcap's line
    led.drop({"12_0", "15"})
    left = led.path.read_text().splitlines()
    assert len(left) == 10 and deep in left  # what it cannot read stays as it was
    assert {json.loads(x)["job"] for x in left[:1]} == {"12_1"}


def test_a_link_or_a_folder_where_the_ledger_goes_is_refused_and_kept(tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("keep me\n")
    link = tmp_path / "ledger.jsonl"
    os.symlink(target, link)
    led = Ledger(link)
    for call in (led.exists, led.entries, lambda: led.add([("a", "1")], "s"),
                 lambda: led.drop({"1"})):
        with pytest.raises(UnsafeFile, match="symbolic link"):
            call()
    assert target.read_text() == "keep me\n" and os.path.islink(link)
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "ledger.jsonl").mkdir()
    with pytest.raises(UnsafeFile, match="folder"):
        Ledger(tmp_path / "d" / "ledger.jsonl").entries()


def test_a_driver_is_gone_only_when_it_ran_here_and_has_ended():
    import socket
    import subprocess
    done = subprocess.Popen(["true"])
    done.wait()
    host = socket.gethostname()
    assert ledger_mod.gone(f"{host}:{done.pid}")
    assert not ledger_mod.gone(f"{host}:{os.getpid()}")
    assert not ledger_mod.gone(f"another-host:{done.pid}")
    assert not ledger_mod.gone(None) and not ledger_mod.gone("garbage")
