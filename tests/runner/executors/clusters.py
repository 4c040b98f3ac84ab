"""The clusters the executor tests run on, each started once per test session and always
stopped (issue 42): a two-node Ray cluster (``bin/ray-local``: a private network namespace,
127.0.0.1 only) and a one-node Slurm cluster (``bin/slurm-local``: munged, slurmctld and
slurmd on 127.0.0.1). Where one cannot start here, its tests skip saying why; on the
project's VM both start (``.ci/run`` installs slurm-wlm and munge).

Commands run as children (``python -m mcap ...``): the store they write is read back here.
The model is small enough for every stage to be a short task and big enough for a task to
be running when a test kills it."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tests.conftest import REPO

MODEL = "gpt:layers=1,hidden=128,vocab=256,seq=32"  # 3 layers: embedding, block, head
SETUP = ["--stages", "2", "--batch-size", "8", "--chunks", "2"]
KEYS = 4  # distinct stage keys of its 2 partitionings under GPipe, and their stages
BALANCES = 2


def env(**extra) -> dict:
    out = dict(os.environ)
    out["PYTHONPATH"] = str(REPO) + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH")
                                     else "")
    out.update({k: str(v) for k, v in extra.items()})
    return out


def sweep_args(store: Path, out: Path, *more: str) -> list[str]:
    return ["sweep", "--model", MODEL, *SETUP, "--store", str(store), "--out", str(out), *more]


def mcap(args: list[str], *, prefix=(), timeout: float = 600, **extra):
    """``python -m mcap ARGS`` as a child (``prefix``: a command it runs under)."""
    return subprocess.run([*prefix, sys.executable, "-m", "mcap", *args], env=env(**extra),
                          cwd=str(REPO), capture_output=True, text=True, timeout=timeout)


def popen(args: list[str], *, prefix=(), log: Path, **extra) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([*prefix, sys.executable, "-m", "mcap", *args], env=env(**extra),
                                cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)


def stage_rows(store: Path) -> list[tuple]:
    """(first, last, position, status, peak, error) of every stored stage run."""
    with sqlite3.connect(store) as conn:
        return conn.execute("SELECT first_layer, last_layer, position, status, peak, error "
                            "FROM stage_runs ORDER BY id").fetchall()


def done_by_node(log: str) -> dict:
    """{node: tasks done} of the last progress line's tasks (``mcap.core.tasks``)."""
    import re
    lines = re.findall(r"\[tasks: \d+ done \(([^)]*)\)", log)
    assert lines, log[-2000:]
    return {node: int(n) for node, n in (part.rsplit(" ", 1) for part in lines[-1].split(", "))}


def wait_for_rows(store: Path, n: int, proc: subprocess.Popen, seconds: float = 300) -> None:
    """Until the store holds ``n`` stage runs (or the command ended)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end and proc.poll() is None:
        try:
            if Path(store).exists() and len(stage_rows(store)) >= n:
                return
        except sqlite3.Error:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{n} stage runs were not stored within {seconds:g} s")


def peaks_of(sweep_file: Path) -> dict:
    """{balance: per-stage peaks} of a sweep file."""
    import json
    data = json.loads(Path(sweep_file).read_text())
    return {tuple(r["balance"]): tuple(r["peaks"]) for r in data["runs"]}


def kill_tree(proc: subprocess.Popen) -> None:
    """End a child started in its own session and everything in that session."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


# --- Ray -----------------------------------------------------------------------------------

def ray_unavailable() -> Optional[str]:
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed (pip install -r requirements.txt pins ray==2.60.0)"
    if os.geteuid() != 0:
        return "the Ray test cluster lives in a private network namespace, which needs root"
    for tool in ("unshare", "nsenter"):
        if shutil.which(tool) is None:
            return f"{tool} (util-linux) is not installed"
    return None


@dataclass
class RayCluster:
    folder: Path
    address: str = "127.0.0.1:6379"

    @property
    def prefix(self) -> tuple:
        """Run a command inside the cluster's network namespace."""
        return (str(REPO / "bin" / "ray-local"), "exec", str(self.folder), "--")

    def net_namespace(self) -> str:
        parent = (self.folder / "unshare.pid").read_text().strip()
        init = subprocess.run(["pgrep", "-P", parent], capture_output=True, text=True
                              ).stdout.split()[0]
        return os.readlink(f"/proc/{init}/ns/net")

    def task_processes(self) -> list[int]:
        """Pids of the cluster's worker processes running a measurement now."""
        ns = self.net_namespace()
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmd = (entry / "cmdline").read_bytes()
                if cmd.startswith(b"ray::measure_task") and os.readlink(entry / "ns/net") == ns:
                    out.append(int(entry.name))
            except OSError:
                continue
        return out


def start_ray() -> RayCluster:
    folder = Path(tempfile.mkdtemp(prefix="mcap-ray-", dir="/tmp"))  # short: socket paths
    out = subprocess.run([str(REPO / "bin" / "ray-local"), "start", str(folder), "1"],
                         env=env(), capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        stop_ray(RayCluster(folder))
        raise RuntimeError(f"bin/ray-local start failed: {out.stderr[-2000:]}")
    return RayCluster(folder)


def stop_ray(cluster: RayCluster) -> None:
    subprocess.run([str(REPO / "bin" / "ray-local"), "stop", str(cluster.folder)],
                   capture_output=True, timeout=60)
    shutil.rmtree(cluster.folder, ignore_errors=True)


# --- Slurm -----------------------------------------------------------------------------------

def slurm_unavailable() -> Optional[str]:
    if importlib.util.find_spec("submitit") is None:
        return "submitit is not installed (pip install -r requirements.txt pins submitit==1.5.4)"
    missing = [t for t in ("sbatch", "slurmctld", "slurmd", "munged") if shutil.which(t) is None]
    if missing:
        return (f"{', '.join(missing)} not installed: Debian's slurm-wlm and munge (.ci/run "
                "installs them as root; bin/slurm-local install)")
    return None


@dataclass
class SlurmCluster:
    folder: Path
    extra: dict = field(default_factory=dict)

    def env(self) -> dict:
        return {"SLURM_CONF": str(self.folder / "slurm.conf"), **self.extra}


def start_slurm() -> SlurmCluster:
    folder = Path(tempfile.mkdtemp(prefix="mcap-slurm-", dir="/tmp"))
    out = subprocess.run([str(REPO / "bin" / "slurm-local"), "start", str(folder), "2"],
                         env=env(), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        stop_slurm(SlurmCluster(folder))
        raise RuntimeError(f"bin/slurm-local start failed: {out.stderr[-2000:]}")
    return SlurmCluster(folder)


def stop_slurm(cluster: SlurmCluster) -> None:
    subprocess.run([str(REPO / "bin" / "slurm-local"), "stop", str(cluster.folder)],
                   capture_output=True, timeout=60)
    shutil.rmtree(cluster.folder, ignore_errors=True)
