"""A small text progress bar for long commands (profile, sweep): runs done / total,
the balance being measured, elapsed time and an estimate of what is left.

On a terminal it redraws one line in place; into a file or pipe it writes one plain
line per update so logs stay readable. Pure formatting lives in ``format_line`` (tested
for equality); ``ProgressBar`` only decides where and how often to write.
"""
from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

_WIDTH = 24


def format_seconds(seconds: Optional[float]) -> str:
    if seconds is None:
        return "?"
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_line(label: str, done: int, total: int, balance: Optional[tuple[int, ...]],
                elapsed: float, remaining: Optional[float]) -> str:
    """``profile [#########...............]  9/27  (3,3,5,19)  0:41 elapsed, ~1:22 left``"""
    filled = _WIDTH * done // total if total else _WIDTH
    bar = "#" * filled + "." * (_WIDTH - filled)
    current = "(" + ",".join(str(n) for n in balance) + ")" if balance else "-"
    return (f"{label} [{bar}] {done}/{total}  {current}  "
            f"{format_seconds(elapsed)} elapsed, ~{format_seconds(remaining)} left")


class ProgressBar:
    """Counts runs done out of ``total``. Runs reused from the store count as done but
    not toward the rate, so a resumed command's estimate reflects real run times."""

    def __init__(self, total: int, label: str = "", stream: Optional[TextIO] = None,
                 clock=time.monotonic):
        self.total = total
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.measured = 0
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def remaining(self) -> Optional[float]:
        if self.measured == 0:
            return None
        per_run = (self.clock() - self.started) / self.measured
        return per_run * max(self.total - self.done, 0)

    def line(self, balance: Optional[tuple[int, ...]] = None) -> str:
        return format_line(self.label, self.done, self.total, balance,
                           self.clock() - self.started, self.remaining())

    def start(self, balance: tuple[int, ...]) -> None:
        """A run of ``balance`` begins (redrawn on a terminal only: logs get one line per run)."""
        if self.tty:
            self._write(self.line(balance))

    def advance(self, balance: tuple[int, ...], measured: bool = True, note: str = "") -> None:
        """A run finished (``measured``) or was found in the store (not measured)."""
        self.done += 1
        self.measured += int(measured)
        text = self.line(balance) + (f"  {note}" if note else "")
        self._write(text)

    def grow(self, extra: int) -> None:
        """Fallback runs were added to the plan."""
        self.total += extra

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

    def _write(self, text: str) -> None:
        if self.tty:
            self.stream.write("\r\x1b[2K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()
