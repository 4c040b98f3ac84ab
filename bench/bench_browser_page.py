"""Time one dashboard page in a real browser (Debian chromium through Playwright).

    python bench/bench_browser_page.py [--path "space?sweep=bundled:vgg11-h512-b8-cpu4-full.sweep.json"]
        [--heading "Partition space"] [--visits 3]

Starts ``streamlit run app.py`` on a free local port with an empty scratch store, then
visits the page ``--visits`` times, each in a new session, and prints the seconds from
``goto`` until the heading and a chart are drawn and the app is idle. The first visit
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
    args = ap.parse_args()
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Debian chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, MCAP_STORE=str(Path(tempfile.mkdtemp()) / "store.sqlite"))
    server = subprocess.Popen([sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"),
                               "--server.port", str(port)], cwd=ROOT, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        times = []
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium, args=FLAGS, headless=True)
            for _ in range(args.visits):
                page = browser.new_page(viewport={"width": 1400, "height": 1000})
                t = time.perf_counter()
                page.goto(f"http://127.0.0.1:{port}/{args.path}")
                page.get_by_role("heading", name=args.heading).first.wait_for(timeout=120_000)
                page.locator(".js-plotly-plot").first.wait_for(timeout=120_000)
                page.wait_for_function(
                    "() => !document.querySelector('[data-testid=stStatusWidget]')", timeout=120_000)
                times.append(time.perf_counter() - t)
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"/{args.path}: visits {', '.join(f'{x:.2f}' for x in times)} s; "
          f"median of the later visits {statistics.median(times[1:] or times):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
