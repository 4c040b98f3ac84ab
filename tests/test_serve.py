"""bin/serve.py: the warm start and the stop (issue 38, item 8)."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A process that watches ``n`` files with Streamlit's poll watcher (what
# .streamlit/config.toml chooses) and then ends, with or without bin/serve.py's stop.
_WATCH = textwrap.dedent("""
    import sys, tempfile, pathlib
    sys.path.insert(0, {bin!r})
    from streamlit.watcher.polling_path_watcher import PollingPathWatcher
    import serve
    folder = pathlib.Path(tempfile.mkdtemp())
    for i in range({n}):
        path = folder / f"m{{i}}.py"
        path.write_text("x = 1")
        PollingPathWatcher(str(path), lambda p: None)
    if {stop}:
        serve.stop_watchers()
""")


def _exit_seconds(n: int, stop: bool) -> float:
    code = _WATCH.format(bin=str(ROOT / "bin"), n=n, stop=stop)
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)
    return time.monotonic() - started


@pytest.mark.integration
def test_the_poll_watcher_no_longer_holds_the_server_after_it_stopped():
    """The server logged "Stopping..." and closed its port, then the interpreter joined the
    poll watcher's threads, which first ran every queued 0.2-s poll (one per watched file,
    four threads): 60 files keep a bare process 3 s, the project's 35 s were seen.
    ``stop_watchers`` cancels the queue."""
    held = _exit_seconds(60, stop=False)
    stopped = _exit_seconds(60, stop=True)
    assert held > 2.5, held  # the cause, still there in Streamlit
    assert stopped < held - 2.0, (stopped, held)
