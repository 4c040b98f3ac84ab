"""The dashboard server stops (issue 38, item 8), walked in a real browser: a profiling job
started and cancelled on the Profile page, then the server signalled (SIGTERM, and SIGINT).
It must exit within a few seconds, with no <defunct> child while it runs and nothing of the
job left after it.

The server runs as bin/dashboard runs it (bin/serve.py with .streamlit/config.toml, whose
``poll`` file watcher held the interpreter 35 s after "Stopping..."); the other browser
test turns the watcher off, so it could not see this.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.test_e2e_browser import _free_port, _idle, browser  # noqa: F401 (a fixture)

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.e2e, pytest.mark.integration]
STOP_S = 5.0  # "within a few seconds"


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, state) of the processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append((int(entry.name), fields[0]))
    return out


def _session(sid: int) -> list[int]:
    """The live processes of session ``sid`` (a job's child and its stage processes)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            out.append(int(entry.name))
    return out


def _wait(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_the_server_stops_after_a_cancelled_profiling_job(browser, tmp_path, signum):  # noqa: F811
    from mcap.store import open_store
    port = _free_port()
    store_path = tmp_path / "store.sqlite"
    env = dict(os.environ, MCAP_STORE=str(store_path), PYTHONPATH=str(ROOT))
    log = open(tmp_path / "server.log", "wb")
    server = subprocess.Popen([sys.executable, "bin/serve.py", "--server.port", str(port)],
                              cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    job_pid = None
    try:
        assert _wait(lambda: _healthy(url), 90), (tmp_path / "server.log").read_text()[-2000:]
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{url}/profile")
        _idle(page, 120_000)
        page.get_by_role("button", name="Start").click()
        cancel = page.get_by_role("button", name="Cancel").first
        cancel.wait_for(timeout=60_000)
        job = open_store(store_path, read_only=True).list_jobs()[0]
        job_pid = job.pid
        cancel.click()
        page.get_by_text("was cancelled").first.wait_for(timeout=60_000)
        # the cancelled child ends and is reaped while the server runs: never <defunct>
        assert _wait(lambda: not _children(server.pid), 30), _children(server.pid)
        page.close()
        started = time.monotonic()
        server.send_signal(signum)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server was still running 30 s after {signum.name}")
        took = time.monotonic() - started
        assert took < STOP_S, f"the server took {took:.1f} s to exit after {signum.name}"
        # nothing of the job is left: its command and its stage processes ended
        assert _wait(lambda: not _session(job_pid), 10), _session(job_pid)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        if job_pid is not None:
            for pid in _session(job_pid):  # only the job this test started
                os.kill(pid, signal.SIGKILL)
        log.close()


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False
