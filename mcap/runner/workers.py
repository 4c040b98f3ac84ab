"""One worker process of a pool (:mod:`mcap.runner.pool`), as the parent sees it: started as
its own ``python -m mcap.runner.worker`` (:class:`Spawned`) or forked by the pool's zygote
(:class:`Forked`); its pid, its exit and why it is gone, and how it is ended."""
from __future__ import annotations

import subprocess
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Optional

from mcap.runner.zygote import Zygote


class Spawned:
    """A worker started as its own ``python -m mcap.runner.worker`` (the caller's child)."""

    def __init__(self, proc: subprocess.Popen, conn: Connection, log: Path):
        self.proc, self.conn, self.log = proc, conn, log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def exit_code(self, timeout: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def describe_exit(self) -> str:
        """Why the process is gone, for a failed run's message: its exit and last stderr line."""
        code = self.exit_code(2)
        if code is None:
            how = "stopped answering"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        tail = _last_line(self.log)
        return how + (f": {tail}" if tail else "")

    def end(self) -> None:
        """Kill (if still running) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.conn.close()


class Forked(Spawned):
    """A worker forked by the pool's zygote: the zygote reaps it and reports its exit."""

    def __init__(self, zygote: Zygote, request: int, conn: Connection, log: Path,
                 timeout: float):
        self.zygote, self.request, self.conn, self.log = zygote, request, conn, log
        self.timeout = timeout

    @property
    def pid(self) -> int:
        """Waits for the fork (the zygote may still be importing torch); 0 if none came."""
        z = self.zygote
        z.wait_for(lambda: self.request in z.forked, self.timeout)
        got = z.forked.get(self.request)
        return got.pid if got is not None and got.pid else 0

    def exit_code(self, timeout: float) -> Optional[int]:
        """The exit code within ``timeout``; None at once if it was not forked yet."""
        z = self.zygote
        z.pump()
        got = z.forked.get(self.request)
        pid = got.pid if got is not None else None
        if not pid:
            return None
        z.wait_for(lambda: pid in z.exited, timeout)
        return z.exited.get(pid)

    def describe_exit(self) -> str:
        if not self.pid:
            z = self.zygote
            why = z.refused or (f"the zygote {'exited' if z.dead else 'did not fork it'}"
                                f"{': ' + _last_line(Path(z.log)) if z.dead else ''}")
            return f"was not started: {why}"
        return super().describe_exit()

    def end(self) -> None:
        self.conn.close()  # a worker waiting for its next job ends on this by itself


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""
