"""Server-side render time of every dashboard page on the bundled data (issue 5, Timing).

    python bench/bench_pages.py [--repeat 5]
    python bench/bench_pages.py --figures [--quick]   # bench/run.py's row (--quick: 1 run a page)

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


def page_times(repeat: int, echo=print) -> dict:
    """Each page's script times over ``repeat`` runs after a warm-up (AppTest)."""
    os.environ.setdefault("MCAP_STORE", str(Path(tempfile.mkdtemp()) / "store.sqlite"))
    from streamlit.testing.v1 import AppTest
    import logging
    for name in ("streamlit", "streamlit.runtime.scriptrunner_utils.script_run_context"):
        logging.getLogger(name).setLevel(logging.ERROR)  # "missing ScriptRunContext" noise

    echo(f"{'page':<10} {'median s':>9} {'min s':>7} {'max s':>7}   (AppTest, {repeat} runs)")
    out = {}
    for name in PAGES:
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.run()
        if name != "overview":
            at.switch_page(f"pages/{name}.py")
        at.run()  # warm-up: imports, the time baseline's timing
        if at.exception:
            raise SystemExit(f"{name}: {at.exception[0].value}")
        times = []
        for _ in range(repeat):
            started = time.perf_counter()
            at.run()
            times.append(time.perf_counter() - started)
        echo(f"{name:<10} {statistics.median(times):>9.3f} {min(times):>7.3f} {max(times):>7.3f}")
        out[name] = times
    return out


def figures(quick: bool = False) -> list:
    """bench/run.py's row: the slowest page's median script time (``quick``: 1 run a page
    after its warm-up, else 5)."""
    from benchtable import Figure
    n = 1 if quick else 5
    got = {k: statistics.median(v) for k, v in page_times(n).items()}
    worst = max(got, key=got.get)
    return [Figure(f"dashboard pages, server-side script time (AppTest, {len(got)} pages, no "
                   "browser)",
                   f"slowest {worst} {got[worst]:.3f} s, median page "
                   f"{statistics.median(got.values()):.3f} s ("
                   + ("one run a page" if n == 1 else f"median of {n} a page")
                   + " after a warm-up)",
                   "a page's own work < 2 s (issues 5, 13 item 4)", timing=True)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--figures", action="store_true", help="print bench/run.py's row only")
    parser.add_argument("--quick", action="store_true", help="with --figures: 1 run a page")
    args = parser.parse_args()
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    page_times(args.repeat)

if __name__ == "__main__":
    main()
