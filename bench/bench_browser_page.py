"""Time one dashboard page in a real browser (Debian chromium through Playwright).

    python bench/bench_browser_page.py [--path "space?sweep=bundled:vgg11-h512-b8-cpu4-full.sweep.json"]
        [--heading "Partition space"] [--visits 3]
    python bench/bench_browser_page.py --all [--visits 2]
    python bench/bench_browser_page.py --interactions [--visits 5]

``--interactions`` times what a user waits for after a click (issue 40, item 3), on one
server whose caches a first round warmed: switching the profile on the Overview (to the
GPT-2 profile and back), the first partitioning typed on Predict in a new session, and a
click on a point of the Partition space scatter (until the box, the ring and the URL follow).
Each is the median of ``--visits`` rounds after the warm-up; the target is 1 s.

``--all`` times every page of the menu, each on its own fresh server (issue 13, item 4:
"every page's first visit on a fresh server"), and prints one line per page and the largest
first visit, after the floor: the same visit of a bare Streamlit app with one small plotly
chart (what the browser and Streamlit cost before mcap does anything).

Starts the dashboard as ``bin/dashboard`` does (``bin/serve.py``; ``--plain``: bare
``streamlit run app.py``) on a free local port with an empty scratch store, then
visits the page ``--visits`` times, each in a new session, and prints the seconds from
``goto`` until the heading is drawn, the app is idle and every element is drawn (no
skeleton left, every plotly chart drawn). The first visit
pays the server's one-time work (imports, file loading, caches); quote the later ones.
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", default="space")
    ap.add_argument("--heading", default="Partition space")
    ap.add_argument("--visits", type=int, default=3)
    ap.add_argument("--all", action="store_true", help="every page, each on a fresh server")
    ap.add_argument("--interactions", action="store_true",
                    help="time a profile switch, a typed partitioning and a scatter click")
    ap.add_argument("--cold-browser", action="store_true",
                    help="with --all: a new browser process (empty cache) for every page")
    ap.add_argument("--warm-browser", action="store_true",
                    help="with --all: load the overview once on a throwaway server first, so "
                         "the browser has Streamlit's own static files cached")
    ap.add_argument("--plain", action="store_true",
                    help="start the server with bare `streamlit run app.py` instead of "
                         "bin/serve.py (what bin/dashboard runs)")
    args = ap.parse_args()
    if args.plain:
        LAUNCH[:] = [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py")]
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Debian chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright
    port = _free_port()
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
        if args.interactions:
            rounds = interactions(browser, port, args.visits)
            for name, ts in rounds.items():
                later = ts[1:] or ts
                print(f"{name:<34} warm-up {ts[0]:.2f} s; then {', '.join(f'{x:.2f}' for x in later)}"
                      f" s; median {statistics.median(later):.2f} s", flush=True)
            return 0
        if not args.all:
            times = visit(browser, port, args.path, args.heading, args.visits, chart=True)
            print(f"/{args.path}: visits {', '.join(f'{x:.2f}' for x in times)} s; "
                  f"median of the later visits {statistics.median(times[1:] or times):.2f} s")
            return 0
        sys.path.insert(0, str(ROOT))
        from pages._shared import PAGES  # the menu: path, title, icon, url
        if args.warm_browser:  # the browser has Streamlit's static files cached for this origin
            visit(browser, port, "", _heading(ROOT / PAGES[0][0]), 1, chart=False)
        times = floor(browser, port, args.visits)
        print(f"{'floor: bare app, one chart':<28} first {times[0]:.2f} s; later "
              f"{', '.join(f'{x:.2f}' for x in times[1:])} s", flush=True)
        firsts = {}
        for path, title, _icon, url in PAGES:
            if args.cold_browser:
                browser.close()
                browser = pw.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
            times = visit(browser, port, url or "", _heading(ROOT / path), args.visits, chart=False)
            firsts[title] = times[0]
            (shown, idle), *_ = STAGES[-1]
            print(f"{title:<28} first {times[0]:.2f} s (heading {shown:.2f}, script done "
                  f"{idle:.2f}); later {', '.join(f'{x:.2f}' for x in times[1:])} s", flush=True)
        browser.close()
    worst = max(firsts, key=firsts.get)
    print(f"largest first visit: {worst} {firsts[worst]:.2f} s; median first visit "
          f"{statistics.median(firsts.values()):.2f} s over {len(firsts)} pages "
          f"({'cold' if args.cold_browser else 'warm' if args.warm_browser else 'one'} browser)")
    return 0


# What bin/dashboard runs (bin/serve.py: warm imports before the first visit); --plain
# switches to bare ``streamlit run app.py`` for comparison.
LAUNCH = [sys.executable, str(ROOT / "bin" / "serve.py")]
STAGES: list = []  # per visit() call: (heading shown, app idle) seconds of each visit


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _heading(page: Path) -> str:
    """The page's st.title text, read from its source (the heading the browser waits for)."""
    import ast
    for node in ast.walk(ast.parse(page.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "title" and node.args
                and isinstance(node.args[0], ast.Constant)):
            return node.args[0].value.split(":")[0]
    raise SystemExit(f"{page}: no st.title to wait for")


FLOOR_APP = """import plotly.graph_objects as go
import streamlit as st
st.title("Floor")
st.plotly_chart(go.Figure(go.Scatter(x=[1, 2, 3], y=[1, 3, 2])))
"""


def floor(browser, port: int, visits: int) -> list:
    """The same visit of a bare Streamlit app with a title and one 3-point plotly chart: what
    any page with a chart costs in this browser on this machine, before mcap does anything."""
    app = Path(tempfile.mkdtemp()) / "floor.py"
    app.write_text(FLOOR_APP)
    saved = LAUNCH[:]
    LAUNCH[:] = [sys.executable, "-m", "streamlit", "run", str(app), "--server.headless", "true"]
    try:
        return visit(browser, port, "", "Floor", visits, chart=True)
    finally:
        LAUNCH[:] = saved


def visit(browser, port: int, path: str, heading: str, visits: int, chart: bool) -> list:
    """Seconds per visit of ``/path`` on one fresh server at ``port``; each visit in a new
    page waits for the heading, (with ``chart``) a plotly chart, the app to be idle, and every
    chart the run sent to be drawn."""
    env = dict(os.environ, MCAP_STORE=str(Path(tempfile.mkdtemp()) / "store.sqlite"))
    server = subprocess.Popen(LAUNCH + ["--server.port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        times, stages = [], []
        for _ in range(visits):
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            t = time.perf_counter()
            page.goto(f"http://127.0.0.1:{port}/{path}")
            page.get_by_role("heading", name=heading).first.wait_for(timeout=120_000)
            shown = time.perf_counter() - t
            if chart:
                page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
            page.wait_for_function(
                "() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=120_000)
            idle = time.perf_counter() - t
            # every element the run sent is drawn: Streamlit shows a skeleton in place of an
            # element whose code is still loading (plotly.js is a lazily loaded chunk)
            page.wait_for_function(
                "() => !document.querySelector('[data-testid=stSkeleton]') && "
                "[...document.querySelectorAll('[data-testid=stPlotlyChart]')]"
                ".every(c => c.querySelector('.js-plotly-plot'))", timeout=120_000)
            times.append(time.perf_counter() - t)
            stages.append((shown, idle))
            page.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    if STAGES is not None:
        STAGES.append(stages)
    return times


IDLE = ("() => !document.querySelector('[data-testid=stStatusWidget]') && "
        "!document.querySelector('[data-testid=stSkeleton]') && "
        "[...document.querySelectorAll('[data-testid=stPlotlyChart]')]"
        ".every(c => c.querySelector('.js-plotly-plot'))")
GPT2 = "gpt2-l12-h256-s256-cpu4.profile.json"
VGG = "vgg11-h512-b8-cpu4.profile.json"


def _idle(page) -> None:
    page.wait_for_function(IDLE, timeout=120_000)


def _pick(page, label: str, option_text: str) -> None:
    """Choose the option of a selectbox (by its label) whose text contains ``option_text``."""
    page.get_by_role("combobox", name=label).click()
    page.get_by_role("option").filter(has_text=option_text).first.click()


def interactions(browser, port: int, rounds: int) -> dict:
    """Seconds per round of each interaction (module docstring); round 0 warms the caches."""
    env = dict(os.environ, MCAP_STORE=str(Path(tempfile.mkdtemp()) / "store.sqlite"))
    server = subprocess.Popen(LAUNCH + ["--server.port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    out: dict = {"Overview: profile to GPT-2": [], "Overview: profile back to VGG11": [],
                 "Predict: first typed partitioning": [], "Partition space: scatter click": []}
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        for _ in range(rounds + 1):
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(url)
            page.get_by_role("heading", name="Model").first.wait_for(timeout=120_000)
            _idle(page)
            for target, key, heading in ((GPT2, "Overview: profile to GPT-2", "hf:gpt2"),
                                         (VGG, "Overview: profile back to VGG11", "vgg11")):
                t = time.perf_counter()
                _pick(page, "Profile (layer statistics)", target)
                page.locator("h3", has_text=heading).first.wait_for(timeout=120_000)
                _idle(page)
                out[key].append(time.perf_counter() - t)
            page.close()

            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{url}/predict")
            box = page.get_by_role("textbox", name="Layers per device")
            box.wait_for(timeout=120_000)
            _idle(page)
            t = time.perf_counter()
            box.fill("3,3,5,19")
            box.press("Enter")
            page.locator('[data-testid="stMetric"]', has_text="3-3-5-19").first.wait_for(
                timeout=120_000)
            _idle(page)
            out["Predict: first typed partitioning"].append(time.perf_counter() - t)
            page.close()

            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(f"{url}/space")
            combo = page.get_by_role("combobox", name="Partitioning (or click a point above)")
            combo.wait_for(timeout=120_000)
            _idle(page)
            page.wait_for_timeout(1000)  # the chart wires its click handlers after drawing
            before = combo.input_value()
            took = None
            for attempt in range(6):  # a point other than the selected one, hovered first
                point = page.locator(".js-plotly-plot .scatterlayer .trace").first \
                    .locator("path.point").nth(7 + 3 * attempt + len(out["Partition space: scatter click"]))
                point.scroll_into_view_if_needed()  # the chart may start below the fold
                box_ = point.bounding_box()
                x, y = box_["x"] + box_["width"] / 2, box_["y"] + box_["height"] / 2
                page.mouse.move(x - 20, y - 20)
                page.mouse.move(x, y, steps=5)
                page.wait_for_timeout(300)
                hover = page.locator(".hoverlayer .hovertext tspan.line")
                hovered = hover.first.text_content().strip() if hover.count() else ""
                if not hovered or hovered == before:
                    continue
                t = time.perf_counter()
                page.mouse.click(x, y, delay=20)
                try:
                    page.wait_for_function(
                        "([sel, want]) => { const c = document.querySelector(sel); "
                        "return c && c.value === want; }",
                        arg=['input[aria-label="Partitioning (or click a point above)"]', hovered],
                        timeout=15_000)
                except Exception:  # the chart was not listening yet: hover and click again
                    continue
                _idle(page)
                took = time.perf_counter() - t
                break
            if took is None:
                raise SystemExit("no click on the scatter selected a point")
            out["Partition space: scatter click"].append(took)
            page.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return out


if __name__ == "__main__":
    sys.exit(main())
