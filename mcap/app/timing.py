"""torchgpipe's balance_by_time for the dashboard, in a child process: the server never
imports torch or builds a model itself (a model too large for memory, or a crash in torch,
takes down the child only; it is started again on the next call). One persistent child per
server imports torch once and answers one JSON request per line (``python -m mcap.cli.timer
--serve``); a warm child answers in seconds where a fresh one pays the torch import.

The spec must be trusted here already: a user spec from a file is refused before any
process starts (``mcap.models.spec.check_trusted``), and the child runs built-in models
only (a spec crosses the pipe as plain text, which is never trusted: data is data)."""
from __future__ import annotations

import atexit
import json
import subprocess
import sys
import threading
from pathlib import Path

from mcap.core.errors import McapError

REPO = Path(__file__).resolve().parents[2]


class _TimingChild:
    def __init__(self):
        self.proc = None
        self.lock = threading.Lock()

    def _start(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "mcap.cli.timer", "--serve"],
                                     cwd=str(REPO), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1)

    def ask(self, request: dict, limit_s: float) -> dict:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            proc = self.proc
            timer = threading.Timer(limit_s, proc.kill)  # a hung timing ends the child
            timer.start()
            try:
                proc.stdin.write(json.dumps(request) + "\n")
                proc.stdin.flush()
                line = proc.stdout.readline()
            except (OSError, ValueError):
                line = ""
            finally:
                timer.cancel()
            if not line:
                proc.kill()
                self.proc = None
                return {"error": f"the timing process ended (exit {proc.wait()}) while timing "
                                 f"{request['spec']}: out of memory or killed after {limit_s:.0f} s"}
            try:
                return json.loads(line)
            except ValueError:
                return {"error": f"the timing process answered {line[:200]!r}"}

    def kill(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


CHILD = _TimingChild()


def _end_child() -> None:
    """At the server's exit: end the timing child rather than leave it to finish a timing as
    an orphan (issue 38, item 8). Without the lock: a daemon thread may hold it, blocked on
    the child's answer."""
    proc = CHILD.proc
    if proc is not None and proc.poll() is None:
        proc.kill()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass


atexit.register(_end_child)


def time_balance_isolated(spec: str, stages: int, micro_batch: int, *, device: str = "cpu",
                          timeout: float = 1.0, seed: int = 0,
                          limit_s: float = 600.0) -> tuple[int, ...]:
    """``mcap.runner.timebalance.time_balance`` in the server's timing child."""
    from mcap.models.spec import check_trusted, is_user_spec

    check_trusted(spec)
    if is_user_spec(str(spec).strip()):
        raise McapError(f"the dashboard times built-in models only, not {spec!r}; time a user "
                        f"model with `python -m mcap recommend --method time --model {spec} ...`")
    answer = CHILD.ask({"spec": str(spec), "stages": int(stages), "micro_batch": int(micro_batch),
                        "device": device, "timeout": float(timeout), "seed": int(seed)}, limit_s)
    if "balance" in answer:
        return tuple(int(n) for n in answer["balance"])
    raise McapError(f"time: {answer.get('error', 'no answer')}")
