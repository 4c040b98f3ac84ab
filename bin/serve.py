"""Start the dashboard's Streamlit server warm (issue 13, item 4: first page visits).

    python bin/serve.py [streamlit run options, e.g. --server.port 8502]

``bin/dashboard`` runs this; it is ``streamlit run app.py`` plus two things done before the
first browser session arrives, so that session is not the one paying for them (and, in a
background thread, the teaching page's action lists, :func:`prefetch_orders`):

- the modules every page imports (pandas, pyarrow, plotly's figure classes, ``mcap.figures``,
  ``mcap.app``, the page helpers) are imported before the server starts listening (about a
  second; not in a background thread, whose half-imported modules a first session could
  meet). None of them imports torch: tests/test_architecture.py checks the render path;
- Streamlit is told that app.py's ``st.navigation`` owns the pages. Until some session has
  called ``st.navigation``, Streamlit runs a deep link such as ``/space`` in its legacy
  ``pages/`` mode (the page file alone); ``pages._shared.restore_url`` then reruns it through
  app.py, so the first visit ran twice. Streamlit's own ``st.navigation`` sets the same flag
  on its first call. If a Streamlit release moves it, nothing breaks: restore_url's rerun
  still applies and only the first visit is slower.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the pages import at render time (one entry per package is enough where the package
# imports its modules; the figure modules are imported by name because pages pick them).
WARM = ("pandas", "pyarrow", "numpy", "plotly.graph_objects", "plotly.express",
        "streamlit.elements.plotly_chart", "pages._shared", "pages._search", "pages._jobs",
        "mcap.core.recommend", "mcap.core.search.bayes", "mcap.core.press.milp",
        "mcap.core.press.mpress", "mcap.io.datasets", "mcap.io.agreement", "mcap.store",
        "mcap.app.jobs", "mcap.app.searches", "mcap.app.capture", "mcap.app.press",
        "mcap.figures.devices", "mcap.figures.capture", "mcap.figures.layers",
        "mcap.figures.overview", "mcap.figures.press", "mcap.figures.recommend",
        "mcap.figures.scaling", "mcap.figures.snippet", "mcap.figures.space",
        "mcap.figures.story", "mcap.figures.timeline", "mcap.figures.teaching",
        "mcap.io.orders", "pages._teaching")


def warm() -> list[str]:
    """Import :data:`WARM` and build one figure of each trace type the pages draw (plotly
    loads its validators on first use); returns the modules that failed to import, so a
    broken page still shows its own error when visited instead of failing the server."""
    import logging

    failed = []
    # Pages define st.cache_data functions at import; imported before the server's runtime
    # exists, each says "No runtime found, using MemoryCacheStorageManager" (4 warnings at
    # every start, issue 26). The cache they get when the pages run is the runtime's.
    import streamlit.runtime.caching.cache_data_api  # noqa: F401 (creates its logger first)
    quiet = logging.getLogger("streamlit.runtime.caching.cache_data_api")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        for name in WARM:
            try:
                importlib.import_module(name)
            except Exception:  # noqa: BLE001 - the page will raise it where the user sees it
                failed.append(name)
    finally:
        quiet.setLevel(level)
    try:
        import plotly.graph_objects as go
        for trace in (go.Scatter, go.Bar, go.Histogram, go.Heatmap):
            go.Figure(trace()).to_json()
    except Exception:  # noqa: BLE001
        failed.append("plotly figures")
    return failed


def prefetch_orders() -> None:
    """Ask torch, in a child process, for the action lists the teaching page draws for the
    default profile (``mcap.io.orders`` keeps them for the server's life), while the server
    starts: the first visit of "Pipeline memory, explained" then starts no child (a torch
    import: seconds). Everything it needs was imported by :func:`warm` in this thread."""
    import threading

    def fetch():
        try:
            from mcap.io import datasets, orders
            from pages._datasets import DEFAULTS
            from pages._teaching import requests_for
            s = datasets.load(datasets.parse_ref(DEFAULTS["profile"])).setup
            orders.answers(requests_for(s, s.stages, s.chunks, s.schedule, 1))
        except Exception:  # noqa: BLE001 - the page asks again and shows its own error
            pass

    threading.Thread(target=fetch, name="mcap-prefetch-orders", daemon=True).start()


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    warm()
    prefetch_orders()
    try:
        from streamlit.runtime.pages_manager import PagesManager
        PagesManager.uses_pages_directory = False  # what st.navigation's first call sets
    except (ImportError, AttributeError):
        pass
    from streamlit.web import cli
    return cli.main(args=["run", str(ROOT / "app.py"), *argv], prog_name="streamlit")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
