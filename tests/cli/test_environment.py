"""The MCAP_* environment variables are checked before any command runs (issue 38, item 7):
a bad value exits 2 naming it, whatever the command; an unknown one is warned about."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mcap.cli import environment
from tests.conftest import REPO, cli


@pytest.mark.parametrize("name,value,needle", [
    ("MCAP_CORUN", "bogus", "MCAP_CORUN='bogus' is not on or off"),
    ("MCAP_CACHE_DIR", "/", "holds files that are not mcap's"),
    ("MCAP_CACHE_DIR", "x" * 5000, "above the system's limit"),
    ("MCAP_STORE_WAIT", "٣", "MCAP_STORE_WAIT='٣' is not seconds"),
    ("MCAP_STORE_WAIT", "-1", "is not seconds"),
    ("MCAP_ISOLATION", "both", "MCAP_ISOLATION='both' is not one of stage, pipeline"),
    ("MCAP_STAGE_SLOTS", "²", "MCAP_STAGE_SLOTS='²' is not a whole number"),
    ("MCAP_EXCHANGE", "nvlink", "MCAP_EXCHANGE='nvlink': expected one of"),
    ("MCAP_STAGE_START", "vfork", "MCAP_STAGE_START='vfork' is not one of fork, spawn"),
    ("MCAP_MAX_CPU_PROCESSES", "٣", "MCAP_MAX_CPU_PROCESSES='٣' is not a whole number"),
    ("MCAP_STORE", "s\x01" + "y" * 300, "has a name of 302 bytes"),
    ("MCAP_DATA_DIR", "/".join(["d" * 200] * 25), "above the system's limit of 4,095"),
    ("MCAP_TRACEBACK", "yes", "MCAP_TRACEBACK='yes' is not 0 or 1"),
    ("MCAP_EXECUTOR", "dask", "MCAP_EXECUTOR='dask' is not an executor"),
    ("MCAP_RETRIES", "-1", "$MCAP_RETRIES '-1' is not a whole number"),
])
def test_a_bad_value_exits_2_naming_it_before_any_command_runs(capsys, monkeypatch, tmp_path,
                                                                 name, value, needle):
    monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, "plan", "--layers", "30", "--stages", "4")
    assert code == 2 and needle in err and out == "", err
    assert list(tmp_path.iterdir()) == []  # nothing written anywhere
    assert not os.path.exists("/machine.json")


def test_every_variable_mcap_reads_is_listed_and_checked():
    """Each MCAP_ name in mcap/ is in VARIABLES (a new variable gets its check here)."""
    import re
    names = set()
    for path in (REPO / "mcap").rglob("*.py"):
        names |= set(re.findall(r"\bMCAP_[A-Z_]+[A-Z]\b", path.read_text()))
    names -= {"MCAP_STOER"}  # the misspelling the docstring names
    assert names <= set(environment.VARIABLES), sorted(names - set(environment.VARIABLES))


def test_an_unknown_variable_is_warned_about_and_the_command_runs(capsys, monkeypatch):
    monkeypatch.setenv("MCAP_STOER", "x")
    code, out, err = cli(capsys, "plan", "--layers", "30", "--stages", "4")
    assert code == 0 and "$MCAP_STOER is not a variable mcap reads" in err and "MCAP_STORE" in err


def test_a_bogus_corun_is_refused_by_the_library_too(monkeypatch):
    from mcap.core.errors import McapError
    from mcap.core.types import Setup
    from mcap.runner import corun
    monkeypatch.setenv("MCAP_CORUN", "bogus")
    with pytest.raises(McapError, match="MCAP_CORUN='bogus'"):
        corun.factors_for("gpt", Setup(stages=2), 4)
    monkeypatch.setenv("MCAP_CORUN", "OFF")
    assert corun.factors_for("gpt", Setup(stages=2), 4) == ()


def test_a_real_subprocess_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "mcap", "plan", "--layers", "30", "--stages",
                           "4"], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO), MCAP_CORUN="bogus"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
