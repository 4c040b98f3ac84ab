"""The executor registry and its options (issue 42): names in registration order, local the
default, options from flags or their environment variables, and bad input exiting 2 with
one line naming the executor and what is missing, before anything starts."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from mcap.core.errors import McapError
from mcap.runner import executors
from tests.conftest import REPO

MEASURE = ["measure", "--model", "gpt:layers=2,hidden=32,vocab=64,seq=16", "--balance", "2,2",
           "--batch-size", "4", "--chunks", "2"]


def test_the_registry_lists_local_first_and_reads_the_environment(monkeypatch):
    assert executors.names()[:3] == ("local", "ray", "slurm") and executors.DEFAULT == "local"
    monkeypatch.delenv(executors.ENV, raising=False)
    assert executors.configured()[0].name == "local" and not executors.get("local").remote
    monkeypatch.setenv(executors.ENV, "slurm")
    monkeypatch.setenv("MCAP_SLURM_TIME", "15")
    executor, settings = executors.configured()
    assert executor.remote and settings.get("slurm_time") == 15
    assert settings.get("retries") == 2 and settings.get("queue_timeout") == 10.0
    monkeypatch.setenv("MCAP_RETRIES", "many")
    with pytest.raises(McapError, match="MCAP_RETRIES 'many' is not a whole number >= 0"):
        executors.configured()
    monkeypatch.setenv(executors.ENV, "kubernetes")
    with pytest.raises(McapError, match="MCAP_EXECUTOR='kubernetes' is not an executor"):
        executors.configured()


def _cli(args, **env):
    full = {**os.environ, "PYTHONPATH": str(REPO), **env}
    return subprocess.run([sys.executable, "-c", "import sys\n"
                           "if sys.argv[1] == 'hide-ray': sys.modules['ray'] = None\n"
                           "from mcap.cli.main import main\n"
                           "sys.exit(main(sys.argv[2:]))", *args], env=full,
                          capture_output=True, text=True, cwd=str(REPO), timeout=120)


def test_a_missing_package_or_command_exits_2_naming_the_executor(tmp_path):
    store = ["--store", str(tmp_path / "s.db")]
    ray = _cli(["hide-ray", *MEASURE, *store, "--executor", "ray"])
    assert ray.returncode == 2 and "Traceback" not in ray.stderr
    assert "executor ray needs the Python package ray" in ray.stderr
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                           if not os.path.exists(os.path.join(p, "sbatch")))
    slurm = _cli(["-", *MEASURE, *store, "--executor", "slurm"], PATH=path)
    assert slurm.returncode == 2 and "executor slurm needs Slurm's sbatch on PATH" in slurm.stderr
    bad = _cli(["-", *MEASURE, *store, "--executor", "ray", "--retries", "-1"])
    assert bad.returncode == 2 and "--retries '-1' is not a whole number >= 0" in bad.stderr
    both = _cli(["-", *MEASURE, *store, "--executor", "ray", "--nnodes", "2"])
    assert both.returncode == 2 and "--executor ray sends each stage" in both.stderr
    together = _cli(["-", *MEASURE, *store, "--executor", "slurm", "--isolation", "pipeline"],
                    PATH=os.environ["PATH"] + os.pathsep + str(tmp_path))
    if "sbatch on PATH" not in together.stderr:  # with Slurm installed: the isolation says
        assert together.returncode == 2 and "stages that run together" in together.stderr
