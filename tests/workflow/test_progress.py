"""The progress bar: exact lines, estimates from measured runs only, tty vs plain."""
from __future__ import annotations

import io

from mcap.workflow.progress import ProgressBar, format_line, format_seconds


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_format_line_exact():
    assert format_line("profile", 6, 24, (3, 3, 5, 19), 41.2, 123.0) == (
        "profile [######..................] 6/24  (3,3,5,19)  0:41 elapsed, ~2:03 left")
    assert format_line("sweep", 0, 5, None, 0, None) == (
        "sweep [........................] 0/5  -  0:00 elapsed, ~? left")
    assert format_seconds(3725) == "1:02:05"


def test_estimate_counts_only_measured_runs():
    clock, out = Clock(), io.StringIO()
    bar = ProgressBar(10, "sweep", stream=out, clock=clock)
    bar.advance((1, 2), measured=False)  # reused from the store: costs no time
    bar.advance((2, 1), measured=False)
    assert bar.remaining() is None
    clock.now += 4.0
    bar.advance((3, 0), measured=True)
    # 4 s for the one measured run, 7 runs left
    assert bar.remaining() == 28.0
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and lines[-1].startswith("sweep [#######") and "3/10" in lines[-1]
    assert "~0:28 left" in lines[-1]


def test_plain_stream_gets_lines_tty_gets_redraws():
    plain, tty = io.StringIO(), Tty()
    for stream in (plain, tty):
        bar = ProgressBar(2, "p", stream=stream, clock=Clock())
        bar.start((1, 1))
        bar.advance((1, 1))
        bar.grow(1)
        bar.advance((2, 0), note="oom")
        bar.close()
    assert "\r" not in plain.getvalue() and len(plain.getvalue().splitlines()) == 2
    assert plain.getvalue().splitlines()[-1].endswith("oom") and "2/3" in plain.getvalue()
    assert tty.getvalue().count("\r") == 3 and tty.getvalue().endswith("\n")
