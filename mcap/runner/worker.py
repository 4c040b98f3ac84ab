"""A persistent stage worker: ``python -m mcap.runner.worker FD``, or forked by the
pool's zygote (:mod:`mcap.runner.zygote`), which calls :func:`serve_fd`.

Started by :mod:`mcap.runner.pool` with one end of a socket pair as file descriptor FD.
It installs the CPU memory tracker, joins the process group once, builds the model once,
says :class:`Hello`, then serves :class:`Job` after :class:`Job` until :class:`Stop` or
until the parent goes away, so consecutive runs pay neither process start, torch import
nor rendezvous (issue 4, start-up cost).
"""
from __future__ import annotations

import gc
import os
import signal
import sys
import traceback
from multiprocessing.connection import Connection


def die_with_parent() -> None:
    """A stage blocked in a receive never reads its pipe; have the kernel kill it when the
    runner process dies instead of leaving it behind (Linux; elsewhere the pipe's EOF)."""
    try:
        import ctypes
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _start(init):
    """What every engine's worker shares (threads pinned, the CPU tracker installed before
    any model exists), then the engine's own start (``mcap.runner.engines``)."""
    from mcap.runner import engines, memtrack
    from mcap.runner.machine import pin_threads

    import torch.distributed.pipelining  # noqa: F401  (its import-time tensors stay uncounted)

    setup = init.setup
    pin_threads(setup.threads)  # before any intra-op work (Setup.threads, issue 11)
    if setup.device == "cpu":
        memtrack.install()  # before any model is built (memtrack docstring)
    return engines.get(setup.engine).build(init)


def _run(init, resident, job):
    from mcap.runner import engines, exchange
    exchange.set_run(job.run_id)  # stages sharing a GPU key their exchange by it
    engine = engines.get(init.setup.engine)
    kwargs = {}
    if job.press is not None:  # only engines that apply MPress plans take the keyword
        kwargs["press"] = job.press
    if init.alone:  # only engines that run stages alone take it
        kwargs["stage"] = job.stage
    return engine.run(resident, init, job.balance, **kwargs)


def serve(conn: Connection) -> None:
    from mcap.core.errors import McapError
    from mcap.runner.machine import collect_here
    from mcap.runner.protocol import Hello, Reply, Stop

    init = conn.recv()
    try:
        resident, info = _start(init)
    except McapError as exc:
        conn.send(Hello(init.rank, os.getpid(), None, str(exc), is_bad_input=True))
        return
    except Exception as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        conn.send(Hello(init.rank, os.getpid(), None, text))
        return
    # Everything built so far lives as long as the process: move it out of the collector's
    # sight, so the collections each run makes take milliseconds, not a third of a second.
    gc.collect()
    gc.freeze()
    conn.send(Hello(init.rank, os.getpid(), info, machine=collect_here(init.setup)))
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            break
        if isinstance(job, Stop):
            break
        conn.send(Reply(job.run_id, init.rank, _run(init, resident, job)))
    import torch.distributed as dist
    if dist.is_initialized():
        dist.destroy_process_group()


def serve_fd(fd: int) -> None:
    try:
        serve(Connection(fd))
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the runner went away


def main(argv: list[str]) -> int:
    die_with_parent()
    serve_fd(int(argv[1]))
    # Served its last job: leave without the interpreter's teardown of torch (as a forked
    # stage process does, mcap.runner.zygote), which a closing pool would wait for.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
