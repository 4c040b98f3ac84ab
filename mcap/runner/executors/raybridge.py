"""The Ray driver of executor ``ray``: ``python -m mcap.runner.executors.raybridge FD``, a
process of its own that the command's pool (``mcap.runner.executors.ray.RayBackend``)
talks to over a socket pair (pickled messages, as the stage workers do).

Why a process of its own: Ray's client threads and its import stay out of the command
(and of the dashboard's job), and a local instance (no ``--ray-address``) lives inside the
bridge's private network and process namespaces where this machine allows them (root):
Ray 2.60 binds its servers to every interface and resolves 127.0.0.1 to the machine's
address, so a namespace with nothing but a loopback is how they stay on 127.0.0.1, and
when the bridge ends, for any reason, the kernel ends every process of the instance.

Each stage-alone measurement is a Ray task with its resources (``num_cpus`` = the setup's
threads, or ``num_gpus=1``; spread over the nodes round robin), in a fresh process: a CPU
task's worker stays and forks a stage process for each task from a zygote it keeps
(``mcap.runner.executors.warm``; the job's ``worker_process_setup_hook`` starts the zygote
before the first task), a GPU task gets a fresh worker (``max_calls=1``;
``mcap.runner.fresh``) whose hook imports torch. Ray's own retries are off: the pool sends
a lost task again itself (``mcap.runner.executors.remote``), counting the tries. A task
tells a small actor where it started, so the pool counts tasks running by node.

Messages: pool -> bridge :class:`Connect`, :class:`Submit`, :class:`Cancel`, :class:`Quit`;
bridge -> pool :class:`Ready`, then ``remote.Started``, ``remote.Finished``,
``remote.Lost``.
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Optional

NO_PRELOAD_ENV = "MCAP_NO_PRELOAD"  # the tracker actor's worker imports no torch


@dataclass(frozen=True)
class Connect:
    address: Optional[str]  # None: start a local instance
    env: tuple[tuple[str, str], ...]  # the tasks' environment (threads, malloc, paths)
    cpus: float  # per task
    gpus: float  # per task
    local_cpus: Optional[int] = None  # a local instance's CPUs (None: this machine's)
    temp_dir: Optional[str] = None  # a local instance's session folder
    private: bool = False  # the bridge runs in its own network namespace: bring lo up


@dataclass(frozen=True)
class Ready:
    resources: tuple[tuple[str, float], ...] = ()
    nodes: tuple[tuple[str, tuple[tuple[str, float], ...]], ...] = ()  # (name, resources)
    error: Optional[str] = None


@dataclass(frozen=True)
class Submit:
    tasks: tuple  # remote.Task
    spec: str
    setup: object


@dataclass(frozen=True)
class Cancel:
    keys: tuple[str, ...]


@dataclass(frozen=True)
class Quit:
    pass


def node_label(node_id: str) -> str:
    """A Ray node as the progress line and the store name it: host/first 8 hex of its id
    (two nodes of one host stay apart)."""
    import socket
    return f"{socket.gethostname()}/{node_id[:8]}"


def measure_task(key: str, kind: str, spec: str, setup, job, tracker):
    """The body of one Ray task: a CPU task in a stage process forked for it by its worker's
    zygote (``mcap.runner.executors.warm``), a GPU task in its fresh worker itself."""
    import ray

    from mcap.runner import fresh
    node = node_label(ray.get_runtime_context().get_node_id())
    tracker.started.remote(key, node)
    from mcap.runner.executors import warm
    if os.environ.get(warm.WARM_ENV):  # a CPU task: a stage process forked for it
        return warm.run(kind, spec, setup, job, node)
    if kind == "probe":
        return fresh.probe(spec, setup, node)
    return fresh.measure(spec, setup, job, node)


class Tracker:
    """Where each task started (an actor of no CPU): the pool's running count by node."""

    def __init__(self):
        self.events: list = []

    def started(self, key: str, node: str) -> None:
        self.events.append((key, node))

    def drain(self) -> list:
        out, self.events = self.events, []
        return out


def loopback_up() -> None:
    """Bring the loopback up in a fresh network namespace (``ip link set lo up``)."""
    import fcntl
    import socket
    import struct
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        req = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(s, siocgifflags, req)[:18])[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def _connect(msg: Connect):
    import ray
    env = dict(msg.env)
    hook = "mcap.runner.fresh.preload"  # a GPU task's fresh worker: torch imported ahead
    if not msg.gpus:  # a CPU task's worker stays: its zygote started ahead
        from mcap.runner.executors.warm import WARM_ENV
        env[WARM_ENV] = "1"
        hook = "mcap.runner.executors.warm.start"
    runtime_env = {"env_vars": env, "worker_process_setup_hook": hook}
    common = dict(runtime_env=runtime_env, log_to_driver=False, configure_logging=False,
                  include_dashboard=False)
    if msg.address:
        common.pop("include_dashboard")
        ray.init(address=msg.address, **common)
    else:
        # enable_worker_prestart: a task's fresh worker (and its torch import) starts while
        # the previous task still runs, as far as cores allow.
        ray.init(num_cpus=msg.local_cpus, _temp_dir=msg.temp_dir,
                 object_store_memory=200 * 2**20,
                 _system_config={"enable_worker_prestart": True}, **common)
    nodes = tuple((node_label(n["NodeID"]), tuple(sorted(
        (k, float(v)) for k, v in n["Resources"].items() if not k.startswith("node:"))))
        for n in ray.nodes() if n.get("Alive"))
    resources = tuple(sorted((k, float(v)) for k, v in ray.cluster_resources().items()
                             if not k.startswith("node:")))
    return Ready(resources, nodes)


def serve(conn: Connection) -> None:
    """Long because: one loop over the pool's messages (submit, cancel, quit) and Ray's
    results (where each task started, then its result or why it was lost), which share the
    maps from keys to Ray's references."""
    from mcap.runner.executors.remote import Finished, Lost, Started

    msg = conn.recv()
    if msg.private:
        loopback_up()
    try:
        import ray
        ready = _connect(msg)
    except Exception as exc:  # noqa: BLE001 (reported to the pool, which names it)
        conn.send(Ready(error=f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300]}"
                        if str(exc).strip() else type(exc).__name__))
        return
    conn.send(ready)
    # A GPU task gets a fresh Ray worker (max_calls=1); a CPU task's worker stays and forks
    # a fresh stage process per task from its zygote (mcap.runner.executors.warm).
    # SPREAD: round robin over the nodes with room, else over those that could run it. Ray's
    # default packs the local node first and spreads only on a fresh view of the others: on
    # a loaded machine a two-node sweep ran every task on the head (the fresh-clone suite).
    task = ray.remote(num_cpus=msg.cpus, num_gpus=msg.gpus, max_calls=1 if msg.gpus else 0,
                      max_retries=0, retry_exceptions=False,
                      scheduling_strategy="SPREAD")(measure_task)
    tracker = ray.remote(num_cpus=0)(Tracker).options(
        runtime_env={"env_vars": {NO_PRELOAD_ENV: "1"}}).remote()
    refs: dict = {}  # ObjectRef -> key
    by_key: dict = {}  # key -> ObjectRef
    where: dict = {}  # key -> node it started on
    next_drain = 0.0

    def drain() -> None:
        try:
            for key, node in ray.get(tracker.drain.remote(), timeout=10):
                where[key] = node
                if key in by_key:
                    conn.send(Started(key, node))
        except ray.exceptions.GetTimeoutError:
            pass

    while True:
        while conn.poll(0 if refs else 0.1):
            m = conn.recv()
            if isinstance(m, Quit):
                return
            if isinstance(m, Submit):
                for t in m.tasks:
                    ref = task.remote(t.key, t.kind, m.spec, m.setup, t.job,
                                                         tracker)
                    refs[ref], by_key[t.key] = t.key, ref
            elif isinstance(m, Cancel):
                for k in m.keys:
                    ref = by_key.pop(k, None)
                    if ref is not None:
                        refs.pop(ref, None)
                        ray.cancel(ref, force=True)
        if not refs:
            continue
        now = time.monotonic()
        if now >= next_drain:  # where tasks started
            next_drain = now + 0.3
            drain()
        # The first result ends the wait (waiting for all of them, as before, held every
        # result back for the whole timeout while others ran), then every other one ready.
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.2)
        if ready:
            ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
            drain()  # where they started, before their results
        for ref in ready:
            key = refs.pop(ref)
            by_key.pop(key, None)
            try:
                conn.send(Finished(key, ray.get(ref)))
            except ray.exceptions.RayError as exc:
                first = (str(exc).strip().splitlines() or [""])[0][:300]
                conn.send(Lost(key, where.get(key), f"{type(exc).__name__}: {first}"))


def main(argv: list[str]) -> int:
    from mcap.runner import worker
    worker.die_with_parent()
    conn = Connection(int(argv[1]))
    try:
        serve(conn)
    except (EOFError, BrokenPipeError, ConnectionResetError, KeyboardInterrupt):
        pass  # the pool went away
    finally:
        try:
            import ray
            if ray.is_initialized():
                ray.shutdown()
        except Exception:  # noqa: BLE001
            pass
    return 0


if __name__ == "__main__":
    # The imported module's functions, not this __main__ copy: Ray pickles the task by
    # reference, and the messages must unpickle as this module's classes on both sides.
    from mcap.runner.executors import raybridge as _module
    sys.exit(_module.main(sys.argv))
