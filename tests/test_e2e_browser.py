"""A real browser drives the dashboard on the bundled data (issue 5, Tests).

Debian's ``chromium`` through Playwright (never ``playwright install``: it downloads a
browser). Starts ``streamlit run app.py`` on a free local port with an empty store, visits
every page, fails on any exception box or console error (a deep link's
``/<page>/_stcore/health`` 404s included: issue 40 item 5, bin/serve.py), runs a recommendation, selects a partitioning, saves screenshots under
``artifacts/screenshots/`` and records each page's render time in
``artifacts/page-render-times.json`` (bench/log/2026-11-22-dashboard-render-times.md quotes them).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "artifacts"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]
# (url path, heading); the default page lives at /
PAGES = [("", "mcap: memory-centric partitioning"), ("profile", "Profile"),
         ("layers", "Layers"), ("predict", "Predict vs measure"), ("space", "Partition space"),
         ("recommend", "Recommend"), ("hybrid", "Hybrid plans"), ("scaling", "Scaling"),
         ("savers", "Memory savers"), ("explained", "Pipeline memory, explained"),
         ("present", "Present")]

pytestmark = [pytest.mark.e2e, pytest.mark.integration]  # a server and a browser: not the fast tier
ROUNDS = 3


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def browser():
    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("Debian chromium is not installed (apt-get install chromium; bin/test does it "
                    "when it can)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the playwright Python package is not installed (pinned in requirements.txt)")
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if not list(Path(os.environ.get("MCAP_DATA_DIR", ROOT / "data")).glob("*.profile.json")):
        pytest.fail("data/ has no bundled *.profile.json; the dashboard must open on real data")
    port = _free_port()
    env = dict(os.environ, MCAP_STORE=str(tmp_path_factory.mktemp("store") / "store.sqlite"),
               PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        # bin/serve.py: what bin/dashboard runs (`streamlit run app.py`, warmed)
        [sys.executable, "bin/serve.py", "--server.port", str(port),
         "--server.address", "127.0.0.1", "--server.headless", "true",
         "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"streamlit did not start: {proc.stdout.read().decode()[-2000:]}")
        time.sleep(0.3)
    yield url
    # Issue 26, item 5: the server stops on SIGTERM after the walk, which ran a background bo
    # search; a hang here fails the module.
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the dashboard server did not stop within 20 s of SIGTERM")


def _idle(page, timeout_ms: int = 60_000) -> None:
    """Wait until the script has finished: the app is drawn and no run is in progress."""
    page.wait_for_selector('[data-testid="stApp"]', timeout=timeout_ms)
    page.wait_for_function(
        """() => {
            const app = document.querySelector('[data-testid="stApp"]');
            const busy = document.querySelector('[data-testid="stStatusWidget"]');
            return app && app.getAttribute('data-test-script-state') !== 'running'
                   && document.querySelector('h1') && (!busy || !busy.innerText.includes('Running'));
        }""", timeout=timeout_ms)


def _unquote(url: str) -> str:
    from urllib.parse import unquote
    return unquote(url)


def _wait_for_url(page, fragment: str, timeout_ms: int = 30_000) -> None:
    """Wait until the page's URL (decoded) contains ``fragment``."""
    try:
        page.wait_for_function("f => decodeURIComponent(location.href).includes(f)", arg=fragment,
                               timeout=timeout_ms)
    except Exception:
        raise AssertionError(f"{fragment!r} not in {_unquote(page.url)!r}") from None
    _idle(page)


def _check_clean(page, errors: list[str], where: str) -> None:
    boxes = page.locator('[data-testid="stException"]')
    assert boxes.count() == 0, f"{where}: exception box: {boxes.first.inner_text()[:500]}"
    assert not errors, f"{where}: console errors: {errors}"


def test_every_page_renders_cleanly_and_fast(browser, server):
    shots = ARTIFACTS / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.text} @ {m.location.get('url', '')}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))

    # A fresh server opened on a deep link (a shared URL) still gets app.py's navigation,
    # not Streamlit's legacy file list; this also warms the server (first imports).
    page.goto(f"{server}/space")
    _idle(page, 120_000)
    page.get_by_role("heading", name="Partition space").first.wait_for(timeout=60_000)
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert "Predict vs measure" in nav and "shared" not in nav and "app" not in nav.split(), nav
    rounds: dict[str, list[float]] = {}
    for round_ in range(ROUNDS):  # the machine is shared: the median of a few visits
        for path, title in PAGES:
            name = path or "overview"
            started = time.perf_counter()
            page.goto(f"{server}/{path}")
            _idle(page, 120_000)
            page.get_by_role("heading", name=title).first.wait_for(timeout=30_000)
            page.wait_for_timeout(300)  # let late deltas (charts) arrive
            _idle(page)
            rounds.setdefault(name, []).append(round(time.perf_counter() - started - 0.3, 3))
            if round_ == 0:
                page.screenshot(path=str(shots / f"{name}.png"), full_page=True)
            _check_clean(page, errors, name)
    times = {name: statistics.median(ts) for name, ts in rounds.items()}

    # Recommend: run bo with a few evaluations; the curve and the result appear.
    page.goto(f"{server}/recommend?method=bo&iterations=6")
    _idle(page)
    page.get_by_role("button", name="Run Bayesian search").click()
    # .first: while the progress fragment reruns, the finished line can be drawn twice for a
    # moment (the stale element and its replacement; seen once in a CI-like run)
    page.get_by_text("Bayesian search: 6 of 6 evaluations").first.wait_for(timeout=120_000)
    _idle(page)
    page.locator('[data-testid="stMetric"]', has_text="recommended").first.wait_for(timeout=60_000)
    _idle(page)
    assert page.locator('[data-testid="stTable"], [data-testid="stDataFrame"]').count() >= 1
    page.screenshot(path=str(shots / "recommend-bo.png"), full_page=True)
    _check_clean(page, errors, "recommend bo")

    # Partition space: click a point of the scatter; the selection box, the per-device bars
    # and the URL follow. Then choose another one in the box.
    page.goto(f"{server}/space")
    _idle(page)
    combo = page.get_by_role("combobox", name="Partitioning (or click a point above)")
    point = page.locator(".js-plotly-plot .scatterlayer .trace").first.locator("path.point").nth(7)
    for attempt in range(3):  # the chart may still be wiring its handlers right after drawing
        page.wait_for_timeout(1000)
        box = point.bounding_box()
        x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
        page.mouse.move(x - 20, y - 20)
        page.mouse.move(x, y, steps=5)
        page.wait_for_timeout(300)
        hovered = page.locator(".hoverlayer .hovertext tspan.line").first.text_content().strip()
        page.mouse.click(x, y, delay=80)
        _idle(page)
        page.wait_for_timeout(500)
        _idle(page)
        if combo.input_value() == hovered:
            break
    clicked = combo.input_value()
    assert clicked == hovered, (clicked, hovered)
    _wait_for_url(page, "balance=" + clicked.replace("-", ","))
    # the ring is drawn on the point just clicked, not on the one before (issue 14 item 4)
    rings = page.locator(".legendtext", has_text="selected ")
    rings.first.wait_for(timeout=10_000)
    assert rings.first.text_content().strip() == f"selected {clicked}"
    option = page.get_by_role("option").nth(2)
    for attempt in range(5):  # the box may be redrawn by a late rerun; open it again then
        _idle(page)
        combo.click()
        combo.press("ArrowDown")
        try:
            option.wait_for(timeout=5_000)
            break
        except Exception:
            page.keyboard.press("Escape")
    chosen = option.inner_text().strip()
    option.click()
    _idle(page)
    page.wait_for_timeout(300)
    assert combo.input_value() == chosen != ""
    # The box shows the choice at once, the URL once the rerun it starts has run: the app
    # can look idle for a moment before that rerun begins (the cause of this step's
    # failures on a loaded machine), so wait for the URL itself.
    _wait_for_url(page, "balance=" + chosen.replace("-", ","))
    page.locator(".legendtext", has_text=f"selected {chosen}").first.wait_for(timeout=10_000)
    assert page.locator('[data-testid="stMetric"]').count() >= 4
    page.screenshot(path=str(shots / "space-selected.png"), full_page=True)
    _check_clean(page, errors, "space selection")

    # Predict: typing a partitioning shows it, with the URL keeping it for a copied link.
    page.goto(f"{server}/predict")
    _idle(page)
    box = page.get_by_role("textbox", name="Layers per device")
    box.fill("3,3,5,19")
    box.press("Enter")
    _idle(page)
    page.locator('[data-testid="stMetric"]', has_text="3-3-5-19").first.wait_for(timeout=30_000)
    _wait_for_url(page, "balance=3,3,5,19")
    _check_clean(page, errors, "predict")

    # Shared state survives in-app navigation: the teaching view opens on that partitioning.
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Pipeline memory, explained").click()
    page.get_by_role("heading", name="Pipeline memory, explained").first.wait_for(timeout=30_000)
    _idle(page)
    assert page.get_by_role("textbox", name="Partitioning (layers per device)").input_value() == "3,3,5,19"
    _wait_for_url(page, "balance=3,3,5,19")
    # Step through the schedule (issue 40, 8): the step button moves the time cursor, and
    # the sentence and table under the chart follow it.
    step_text = page.get_by_text(re.compile(r"^Step \d+ of 0-\d+")).first
    before = int(step_text.inner_text().split()[1])
    page.get_by_role("button", name="▶").click()
    _idle(page)
    page.get_by_text(re.compile(rf"^Step {before + 1} of 0-\d+")).first.wait_for(timeout=30_000)
    page.screenshot(path=str(shots / "explained-step.png"), full_page=True)
    _check_clean(page, errors, "explained step")
    page.locator('[data-testid="stSidebarNav"]').get_by_text("Predict vs measure").click()
    page.get_by_role("heading", name="Predict vs measure").first.wait_for(timeout=30_000)
    _idle(page)
    box = page.get_by_role("textbox", name="Layers per device")
    assert box.input_value() == "3,3,5,19"

    # Bad input: an st.error naming the values, never a traceback.
    box.fill("3,3,5,18")
    box.press("Enter")
    _idle(page)
    alert = page.locator('[data-testid="stAlert"]', has_text="sums to 29")
    alert.first.wait_for(timeout=30_000)
    _check_clean(page, errors, "predict bad input")
    context.close()

    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / "page-render-times.json").write_text(json.dumps(
        {"median_s": times, "runs_s": rounds}, indent=1))
    print("page render times (s):", times)
    # The target is < 2 s per page on the bundled data (issue 5, Timing); recorded, and
    # only a gross regression fails here (the machine is shared).
    assert max(times.values()) < 20, times
