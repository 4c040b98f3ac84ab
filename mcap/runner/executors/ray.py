"""Executor ``ray``: every stage-alone measurement a Ray task in a fresh process, on an
existing cluster (``--ray-address HOST:PORT``) or on a local instance this command starts
and ends (issue 42). The Ray driver is a process of its own
(``mcap.runner.executors.raybridge``); this module is the command's side of it."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Pipe, wait
from pathlib import Path
from typing import Optional

from mcap.core.errors import McapError
from mcap.runner.executors.base import QUEUE_TIMEOUT, RETRIES, Executor, Flag, register
from mcap.runner.executors.remote import Backend

ADDRESS = Flag("--ray-address", "MCAP_RAY_ADDRESS", "a running Ray cluster's HOST:PORT (ray "
               "start --head prints it); without it a local instance is started for the "
               "command and ended with it", "HOST:PORT")
LOCAL_CPUS = Flag("--ray-local-cpus", "MCAP_RAY_LOCAL_CPUS", "CPUs of the local instance "
                  "(default: this machine's cores)", "N", "count")
CONNECT_SECONDS = 15.0  # an address that does not answer within this is refused (exit 2)
START_SECONDS = 180.0  # a local instance (or the connection) ready within this
_REPO = Path(__file__).resolve().parents[3]


@register
class Ray(Executor):
    name = "ray"
    label = "Ray (a task per measurement)"
    help = ("each stage-alone measurement a Ray task in a fresh process (1 GPU, or --threads "
            "CPU cores), on --ray-address or a local instance")
    remote = True
    needs = "ray"
    flags = (ADDRESS, LOCAL_CPUS, RETRIES, QUEUE_TIMEOUT)

    def check(self, settings) -> None:
        super().check(settings)
        address = settings.get("ray_address")
        if address:
            reachable(address, CONNECT_SECONDS)

    def pool(self, spec, setup, settings, *, world, timeout, startup_timeout, group, alone):
        from mcap.runner.executors.remote import RemotePool
        self.check(settings)
        return RemotePool(self, settings, spec, setup, timeout=timeout,
                          startup_timeout=startup_timeout,
                          backend=lambda: RayBackend(settings, spec, setup))


def parse_address(address: str) -> tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise McapError(f"executor ray: --ray-address {address!r:.80} is not HOST:PORT "
                        "(e.g. 127.0.0.1:6379)")
    return host.strip("[]"), int(port)


def reachable(address: str, seconds: float) -> None:
    """McapError (exit 2) when nothing accepts a connection at ``address`` in ``seconds``."""
    host, port = parse_address(address)
    try:
        with socket.create_connection((host, port), timeout=seconds):
            return
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
    raise McapError(f"executor ray: no Ray cluster answers at {address} within {seconds:g} s "
                    f"({why}); start one (ray start --head) or leave --ray-address out to "
                    "start a local instance")


def private_namespace() -> bool:
    """Whether a local instance can live in a network namespace of its own (root and
    ``unshare``): then its servers are reachable on its loopback alone."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class RayBackend(Backend):
    """The pool's side of the bridge process (module docstring)."""
    name = "ray"

    def __init__(self, settings, spec: str, setup):
        self.settings, self.spec, self.setup = settings, spec, setup
        self.address: Optional[str] = settings.get("ray_address")
        self.proc: Optional[subprocess.Popen] = None
        self.conn = None
        self.ready = None
        self._tmp = tempfile.mkdtemp(prefix="mcap-ray-")
        self.log = Path(self._tmp) / "bridge.log"

    # ---- what tasks ask ---------------------------------------------------------------
    @property
    def gpus(self) -> float:
        return 1.0 if self.setup.device == "cuda" else 0.0

    @property
    def cpus(self) -> float:
        return 0.0 if self.gpus else float(self.setup.threads)

    def asks(self) -> str:
        return "1 GPU" if self.gpus else f"{self.cpus:g} CPU"

    def resources(self) -> str:
        if self.ready is None:
            return ""
        def shown(resources):
            return ", ".join(f"{k} {v:g}" for k, v in resources
                             if k not in ("memory", "object_store_memory")
                             and not k.startswith("node:"))
        nodes = self.ready.nodes
        return (f"{shown(self.ready.resources) or 'no resources'} on {len(nodes)} node"
                f"{'s' if len(nodes) != 1 else ''} ("
                + "; ".join(f"{name}: {shown(r)}" for name, r in nodes) + ")")

    # ---- life cycle -------------------------------------------------------------------
    def connect(self, deadline: float) -> None:
        from mcap.runner.executors.raybridge import Connect
        from mcap.runner.machine import process_env
        parent, child = Pipe(duplex=True)
        private = not self.address and private_namespace()
        cmd = [sys.executable, "-m", "mcap.runner.executors.raybridge", str(child.fileno())]
        if private:  # the instance and every process of it end with the bridge
            cmd = ["unshare", "--net", "--pid", "--fork", "--mount-proc", "--kill-child", *cmd]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), os.getcwd(),
                                                        env.get("PYTHONPATH", "")) if p)
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        if not self.address:  # a local instance keeps its state (its auth token) in the
            env["HOME"] = os.path.join(self._tmp, "home")  # bridge's folder, not ~/.ray
            os.makedirs(env["HOME"], exist_ok=True)
        tasks_env = {"PYTHONPATH": env["PYTHONPATH"], **process_env(self.setup.threads)}
        for name in ("TORCH_EXTENSIONS_DIR", "MCAP_CACHE_DIR"):
            if os.environ.get(name):
                tasks_env[name] = os.environ[name]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, pass_fds=[child.fileno()], stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT, env=env,
                                         cwd=str(_REPO), start_new_session=True)
        child.close()
        self.conn = parent
        local_cpus = self.settings.get("ray_local_cpus")
        parent.send(Connect(self.address, tuple(sorted(tasks_env.items())), self.cpus, self.gpus,
                            local_cpus=local_cpus, temp_dir=None if private else
                            os.path.join(self._tmp, "session"), private=private))
        limit = min(deadline, time.monotonic() + START_SECONDS)
        where = self.address or "a local instance"
        if not wait([parent], max(0.0, limit - time.monotonic())):
            self.close()
            raise McapError(f"executor ray: {where} did not answer within "
                            f"{START_SECONDS:g} s")
        try:
            ready = parent.recv()
        except (EOFError, OSError):
            tail = _tail(self.log)
            self.close()
            raise McapError(f"executor ray: the Ray driver process exited while connecting to "
                            f"{where}: {tail or 'no output'}") from None
        if ready.error:
            self.close()
            raise McapError(f"executor ray: could not connect to {where}: {ready.error}")
        self.ready = ready
        self._check_resources()

    def _check_resources(self) -> None:
        """A GPU request on a cluster without GPUs, or more cores than any node has: exit
        2 now (Ray would queue such a task for ever)."""
        have = dict(self.ready.resources)
        if self.gpus and have.get("GPU", 0) < self.gpus:
            self.close()
            raise McapError(f"executor ray: each task asks 1 GPU (--device cuda) but the "
                            f"cluster at {self.address or 'the local instance'} has no GPU "
                            f"resources ({self.resources()})")
        most = max((dict(r).get("CPU", 0.0) for _, r in self.ready.nodes), default=0.0)
        if self.cpus > most:
            self.close()
            raise McapError(f"executor ray: each task asks {self.cpus:g} CPU (--threads) but "
                            f"no node of the cluster has that many ({self.resources()})")

    def submit(self, tasks) -> None:
        from mcap.runner.executors.raybridge import Submit
        self._send(Submit(tuple(tasks), self.spec, self.setup))

    def cancel(self, keys) -> None:
        from mcap.runner.executors.raybridge import Cancel
        if keys and self.conn is not None:
            self._send(Cancel(tuple(keys)))

    def _send(self, msg) -> None:
        try:
            self.conn.send(msg)
        except (OSError, ValueError):
            raise McapError(f"executor ray: the Ray driver process is gone: "
                            f"{_tail(self.log) or 'no output'}") from None

    def poll(self, timeout: float) -> list:
        out = []
        if not wait([self.conn], timeout):
            return out
        while self.conn.poll(0):
            try:
                out.append(self.conn.recv())
            except (EOFError, OSError):
                raise McapError(f"executor ray: the Ray driver process exited: "
                                f"{_tail(self.log) or 'no output'}") from None
        return out

    def close(self) -> None:
        from mcap.runner.executors.raybridge import Quit
        if self.conn is not None:
            try:
                self.conn.send(Quit())
            except (OSError, ValueError):
                pass
        if self.proc is not None:
            try:
                self.proc.wait(timeout=20)  # ray.shutdown() ends a local instance
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None
        shutil.rmtree(self._tmp, ignore_errors=True)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(t.strip()[:300] for t in text[-lines:])
