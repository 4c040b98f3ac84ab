"""Server-side render time of every dashboard page on the bundled data (issue 5, Timing).

    python bench/bench_pages.py [--repeat 5]

Runs each page with Streamlit's AppTest (no browser) ``--repeat`` times after one warm-up
run and prints the median script time per page. The browser's view of the same pages
(including the network and drawing) comes from tests/test_e2e_browser.py, which writes
artifacts/page-render-times.json. Note: AppTest gives every run fresh st.cache_data
storage, so these are uncached renders; a real server caches across reruns.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PAGES = ("overview", "profile", "layers", "predict", "space", "recommend", "scaling", "explained",
         "present")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("MCAP_STORE", str(Path(tempfile.mkdtemp()) / "store.sqlite"))
    from streamlit.testing.v1 import AppTest
    import logging
    for name in ("streamlit", "streamlit.runtime.scriptrunner_utils.script_run_context"):
        logging.getLogger(name).setLevel(logging.ERROR)  # "missing ScriptRunContext" noise

    print(f"{'page':<10} {'median s':>9} {'min s':>7} {'max s':>7}   (AppTest, {args.repeat} runs)")
    for name in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.run()
        if name != "overview":
            at.switch_page(f"pages/{name}.py")
        at.run()  # warm-up: imports, the time baseline's timing
        if at.exception:
            raise SystemExit(f"{name}: {at.exception[0].value}")
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - started)
        print(f"{name:<10} {statistics.median(times):>9.3f} {min(times):>7.3f} {max(times):>7.3f}")


if __name__ == "__main__":
    main()
