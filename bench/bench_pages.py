"""Server-side render time of every dashboard page on the bundled data (issue 5, Timing).

    python bench/bench_pages.py [--repeat 5]
    python bench/bench_pages.py --figures [--quick]   # bench/run.py's row (--quick: 1 run a page)
    python bench/bench_pages.py --interactions [--repeat 5]

Runs each page with Streamlit's AppTest (no browser) ``--repeat`` times after one warm-up
run and prints the median script time per page. The browser's view of the same pages
(including the network and drawing) comes from tests/test_e2e_browser.py, which writes
artifacts/page-render-times.json. Note: AppTest gives every run fresh st.cache_data
storage, so these are uncached renders; a real server caches across reruns.

``--interactions``: the server's share of what bench_browser_page.py --interactions times in
Chromium (issue 40, item 3): the script run after a profile switch on the Overview, a typed
partitioning on Predict and a choice of point on Partition space, in one AppTest session
(its caches warm after the first round), the median of ``--repeat`` rounds.
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


def interaction_times(repeat: int, echo=print) -> dict:
    """The script time of each interaction (module docstring), ``repeat`` rounds after one."""
    os.environ.setdefault("MCAP_STORE", str(Path(tempfile.mkdtemp()) / "store.sqlite"))
    from streamlit.testing.v1 import AppTest
    import logging
    for name in ("streamlit", "streamlit.runtime.scriptrunner_utils.script_run_context"):
        logging.getLogger(name).setLevel(logging.ERROR)
    gpt2 = "bundled:gpt2-l12-h256-s256-cpu4.profile.json"
    vgg = "bundled:vgg11-h512-b8-cpu4.profile.json"
    out: dict = {}

    def timed(name, act):
        started = time.perf_counter()
        act()
        out.setdefault(name, []).append(time.perf_counter() - started)

    for _ in range(repeat + 1):
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.run()
        timed("Overview: profile to GPT-2",
              lambda: at.selectbox(key="choose-profile").set_value(gpt2).run())
        timed("Overview: profile back to VGG11",
              lambda: at.selectbox(key="choose-profile").set_value(vgg).run())
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.switch_page("pages/predict.py")
        at.run()
        timed("Predict: first typed partitioning",
              lambda: at.text_input(key="pick-text").set_value("3,3,5,19").run())
        at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
        at.switch_page("pages/space.py")
        at.run()
        options = at.selectbox(key="space-pick").options
        timed("Partition space: another point",
              lambda: at.selectbox(key="space-pick").set_value(options[7 + len(
                  out.get("Partition space: another point", []))]).run())
    for name, ts in out.items():
        echo(f"{name:<34} first {ts[0]:.3f} s; median of the next {repeat} "
             f"{statistics.median(ts[1:]):.3f} s")
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
    parser.add_argument("--interactions", action="store_true",
                        help="the script time of a profile switch, a typed partitioning and "
                             "a point chosen on Partition space")
    args = parser.parse_args()
    if args.interactions:
        interaction_times(args.repeat)
        return
    if args.figures:
        from benchtable import show
        show(figures(args.quick))
        return
    page_times(args.repeat)

if __name__ == "__main__":
    main()
