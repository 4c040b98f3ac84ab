"""Warm stage processes: a zygote that imports torch once and forks one stage worker per
request (issue 13, item 2: worker start-up dominated one-off runs).

``python -m mcap.runner.zygote FD`` is started by :mod:`mcap.runner.pool` once per pool, as
a plain subprocess (so the caller's ``__main__`` is never re-imported), with the setup's
thread environment. It imports torch, ``torch.distributed.pipelining``, the runner's
modules and the memtrack extension, and then, single-threaded and without having run a
single tensor operation in a parallel region, builds the pool's model once
(:class:`Prepare`, :func:`mcap.runner.pipelining.prebuild`: on one intra-op thread,
uncounted, shared copy-on-write by every child), and forks a child per :class:`Fork`
request. The child closes every descriptor of the zygote's and serves as
:mod:`mcap.runner.worker` does (it pins its threads and installs memtrack before it builds
a stage), so what a forked stage counts starts at zero exactly as in a fresh process.

Why each precaution:
- **No parallel region in the zygote.** OpenMP's thread pool is not fork-safe (a child of
  a process whose pool ran may deadlock in its first parallel region); importing torch
  starts no pool, and the model is built with one intra-op thread. The zygote checks it is single-threaded before every fork and refuses
  (the pool then starts plain processes) if it is not. numpy's OpenBLAS starts a pool at
  import, so the zygote runs with ``OPENBLAS_NUM_THREADS=1`` (torch does not use it).
- **No CUDA.** A CUDA context does not survive fork; importing torch creates none, and
  the pool forks only CPU setups (CUDA stage processes are still spawned).
- **Dies with its parent, and so do its children.** The zygote has ``PR_SET_PDEATHSIG``
  on the runner; each child has it on the zygote (and exits if the zygote is already
  gone when it sets it).
- **Reaping.** Only the zygote can wait for its children, so it reaps them and reports
  each exit status (:class:`Exited`): the pool names how a stage process died from it,
  and kills stage processes through the zygote, which never signals a pid it has reaped.

The zygote also answers :class:`Orders`: a schedule's action list
(:func:`mcap.runner.orders.generate`), which the runner replays a run's estimate over. It
has ``torch.distributed.pipelining`` imported already; the runner's process would spend
a second or two importing it for a list that takes a millisecond (issue 42, item 6).

Messages (pickled over a socket pair; a Fork's descriptor follows it by SCM_RIGHTS):
pool -> zygote :class:`Prepare`, :class:`Fork`, :class:`Kill`, :class:`Orders`,
:class:`Quit`; zygote -> pool :class:`Ready`, :class:`Forked`, :class:`Exited`,
:class:`OrdersOf`.
"""
from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.reduction import recv_handle
from typing import Optional

# What every stage worker imports anyway; importing it here is what the fork saves.
PRELOAD = ("torch", "torch.distributed", "torch.distributed.pipelining", "mcap.models",
           "mcap.runner.engines.pipelining", "mcap.runner.pipelining", "mcap.runner.capture.device",
           "mcap.runner.train", "mcap.runner.machine", "mcap.runner.worker")


@dataclass(frozen=True)
class Fork:
    request: int  # numbers the answer (Forked)
    log: str  # the child's stdout and stderr


@dataclass(frozen=True)
class Prepare:
    """Build what every child shares before the first fork (the pool's model)."""
    spec: str
    setup: object  # mcap.core.types.Setup


@dataclass(frozen=True)
class Kill:
    pids: tuple[int, ...]


@dataclass(frozen=True)
class Quit:
    pass


@dataclass(frozen=True)
class Orders:
    """The action list of ``schedule`` with G ranks, V chunks per rank, M micro-batches."""
    request: int
    schedule: str
    stages: int
    virtual: int
    chunks: int


@dataclass(frozen=True)
class OrdersOf:
    request: int
    orders: object  # mcap.core.schedules.actions.ActionList, or None (then error says why)
    error: Optional[str] = None


@dataclass(frozen=True)
class Ready:
    threads: int  # threads of the zygote after the imports (1: safe to fork)
    error: Optional[str] = None  # why it will not fork (then it answers no Fork)


@dataclass(frozen=True)
class Forked:
    request: int
    pid: Optional[int]
    error: Optional[str] = None


@dataclass(frozen=True)
class Exited:
    pid: int
    code: int  # as subprocess reports it: the exit code, or -signal


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        import threading
        return threading.active_count()


def _preload() -> Optional[str]:
    """Import what the workers need; None when forking is safe, else why not."""
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    from mcap.runner import memtrack
    memtrack.load()  # compiled once per environment; loading is not installing
    import torch
    if torch.cuda.is_initialized():  # pragma: no cover (nothing above touches CUDA)
        return "CUDA was initialised while importing"
    if _threads() != 1:
        return f"the zygote runs {_threads()} threads after importing torch"
    return None


def _prepare(msg: Prepare) -> None:
    import gc

    from mcap.runner import engines
    if engines.get(msg.setup.engine).prebuilds:  # its workers build pipelining's Resident
        from mcap.runner import pipelining
        pipelining.prebuild(msg.spec, msg.setup)
    gc.collect()
    gc.freeze()  # imports and model stay shared with the children, out of the collector's way


def _orders(msg: Orders) -> OrdersOf:
    try:
        from mcap.runner.orders import generate
        return OrdersOf(msg.request, generate(msg.schedule, msg.stages, msg.virtual,
                                              msg.chunks))
    except Exception as exc:  # noqa: BLE001 (the runner generates it itself, and raises)
        return OrdersOf(msg.request, None, f"{type(exc).__name__}: {exc}")


def _status(raw: int) -> int:
    if os.WIFSIGNALED(raw):
        return -os.WTERMSIG(raw)
    return os.WEXITSTATUS(raw) if os.WIFEXITED(raw) else raw


def _child(conn: Connection, fd: int, log: str, keep_out: list[int]) -> None:
    """In the forked child: detach from the zygote's descriptors, then serve as a worker."""
    from mcap.runner import worker

    code = 0
    try:
        zygote = os.getppid()
        worker.die_with_parent()
        if os.getppid() != zygote:  # the zygote died before the signal was armed
            os._exit(0)
        for other in keep_out:
            os.close(other)
        conn.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
        worker.serve_fd(fd)
    except BaseException:  # noqa: BLE001 (the child must never return into the zygote)
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve(conn: Connection) -> None:
    """Long because: one loop answers every message of the pool (fork, prepare, orders, kill,
    quit) and reaps the children it forked, which the fork and kill branches share."""
    why = _preload()
    conn.send(Ready(_threads(), why))
    if why:
        return
    children: dict[int, int] = {}  # pid -> pidfd (or -1 where there are no pidfds)

    def reap(block_for: tuple[int, ...] = ()) -> None:
        for pid in list(children):
            done, raw = os.waitpid(pid, 0 if pid in block_for else os.WNOHANG)
            if done:
                fd = children.pop(pid)
                if fd >= 0:
                    os.close(fd)
                conn.send(Exited(pid, _status(raw)))

    while True:
        fds = [fd for fd in children.values() if fd >= 0]
        polling = any(fd < 0 for fd in children.values())
        ready = wait([conn, *fds], timeout=0.1 if polling else None)
        reap()
        if conn not in ready:
            continue
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            break
        if isinstance(msg, Quit):
            break
        if isinstance(msg, Orders):
            conn.send(_orders(msg))
            continue
        if isinstance(msg, Prepare):
            _prepare(msg)
            continue
        if isinstance(msg, Kill):
            mine = tuple(p for p in msg.pids if p in children)
            for pid in mine:
                os.kill(pid, signal.SIGKILL)  # not reaped yet: the pid is still this child
            reap(block_for=mine)
            continue
        fd = recv_handle(conn)
        if _threads() != 1:
            os.close(fd)
            conn.send(Forked(msg.request, None, f"the zygote runs {_threads()} threads"))
            continue
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(conn, fd, msg.log, [f for f in children.values() if f >= 0])
        os.close(fd)
        try:
            children[pid] = os.pidfd_open(pid)
        except (AttributeError, OSError):
            children[pid] = -1
        conn.send(Forked(msg.request, pid))
    for pid in list(children):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap(block_for=tuple(children))  # nothing of the pool's is left running when we exit


def main(argv: list[str]) -> int:
    from mcap.runner import worker

    worker.die_with_parent()
    conn = Connection(int(argv[1]))
    try:
        serve(conn)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the pool went away
    # Every child is reaped and nothing is left to write: leave without the interpreter's
    # teardown of torch and the prebuilt model (a few hundred ms a one-off measure waited
    # for; issue 42, item 6).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # Run the imported module's main, not this __main__ copy: the messages must pickle as
    # mcap.runner.zygote classes on both sides.
    from mcap.runner import zygote as _module
    sys.exit(_module.main(sys.argv))


# ---- the pool's side ---------------------------------------------------------------------
class Zygote:
    """The pool's handle on one zygote process: fork requests, kills, exit statuses."""

    def __init__(self, env: dict, cwd: str, log: str):
        import subprocess
        from multiprocessing.connection import Pipe

        self.conn, child_end = Pipe(duplex=True)
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "mcap.runner.zygote", str(child_end.fileno())],
                pass_fds=[child_end.fileno()], stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True)
        child_end.close()
        self.ready: Optional[Ready] = None
        self.forked: dict[int, Forked] = {}  # by request number
        self.exited: dict[int, int] = {}  # pid -> exit code (-signal)
        self.answers: dict[int, OrdersOf] = {}  # by request number
        self.dead = False  # the zygote itself is gone (its pipe closed)
        self._requests = 0

    def prepare(self, spec: str, setup) -> None:
        """Have the model built once, before the forks that follow (Prepare)."""
        try:
            self.conn.send(Prepare(spec, setup))
        except OSError:
            self.dead = True

    def fork(self, child_end: Connection, log: str) -> int:
        """Ask for one stage process serving ``child_end``; returns the request number.
        The zygote forks as soon as its imports are done; until then requests queue."""
        from multiprocessing.reduction import send_handle

        self._requests += 1
        try:
            self.conn.send(Fork(self._requests, log))
            send_handle(self.conn, child_end.fileno(), self.proc.pid)
        except OSError:
            self.dead = True
        return self._requests

    def pump(self, timeout: float = 0.0) -> None:
        """Read what the zygote has said, waiting up to ``timeout`` for the first word."""
        import time

        end = time.monotonic() + timeout
        while not self.dead and wait([self.conn], max(0.0, end - time.monotonic())):
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                self.dead = True
                break
            if isinstance(msg, Ready):
                self.ready = msg
            elif isinstance(msg, Forked):
                self.forked[msg.request] = msg
            elif isinstance(msg, Exited):
                self.exited[msg.pid] = msg.code
            elif isinstance(msg, OrdersOf):
                self.answers[msg.request] = msg
            end = time.monotonic()  # then take only what is already there

    def wait_for(self, done, timeout: float) -> bool:
        """Pump until ``done()`` or the zygote is gone or ``timeout`` passed."""
        import time

        end = time.monotonic() + timeout
        while not done():
            left = end - time.monotonic()
            if left <= 0 or self.dead:
                return bool(done())
            self.pump(left)
        return True

    def orders(self, schedule: str, stages: int, virtual: int, chunks: int,
               timeout: float = 60.0):
        """The schedule's action list as the zygote generates it
        (:func:`mcap.runner.orders.generate`: the same torch, the same code), or None when
        it could not answer (gone, refused to run, an error, ``timeout`` passed): the
        caller then generates it itself, which raises what torch refuses."""
        if self.dead or self.refused:
            return None
        self._requests += 1
        request = self._requests
        try:
            self.conn.send(Orders(request, schedule, int(stages), int(virtual), int(chunks)))
        except OSError:
            self.dead = True
            return None
        if not self.wait_for(lambda: request in self.answers, timeout):
            return None
        return self.answers.pop(request).orders

    @property
    def refused(self) -> Optional[str]:
        """Why this zygote will not fork (then the pool spawns plain processes)."""
        if self.ready is not None and self.ready.error:
            return self.ready.error
        errors = [f.error for f in self.forked.values() if f.error]
        return errors[0] if errors else None

    def kill(self, pids: list[int], timeout: float = 5.0) -> None:
        """SIGKILL these children and wait until the zygote has reaped them."""
        live = [p for p in pids if p not in self.exited]
        if not live or self.dead:
            return
        try:
            self.conn.send(Kill(tuple(live)))
        except OSError:
            self.dead = True
            return
        if not self.wait_for(lambda: all(p in self.exited for p in live), timeout):
            self.close(quit_first=False)  # unresponsive: its children die with it

    def close(self, quit_first: bool = True) -> None:
        """End the zygote; it kills and reaps every child it still has before exiting."""
        import subprocess

        if quit_first and not self.dead:
            try:
                self.conn.send(Quit())
            except OSError:
                pass
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.dead = True
        self.conn.close()
