"""Start the dashboard's Streamlit server warm (issue 13, item 4: first page visits).

    python bin/serve.py [streamlit run options, e.g. --server.port 8502]

``bin/dashboard`` runs this; it is ``streamlit run app.py`` plus two things done before the
first browser session arrives, so that session is not the one paying for them (and, in a
background thread, the teaching page's action lists, :func:`prefetch_orders`):

- the modules every page imports (pandas, pyarrow, plotly's figure classes, ``mcap.figures``,
  ``mcap.app``, the page helpers) are imported before the server starts listening (about a
  second; not in a background thread, whose half-imported modules a first session could
  meet). None of them imports torch: tests/test_architecture.py checks the render path.
  They are then frozen out of the garbage collector's full passes (:func:`freeze_warm`);
- Streamlit is told that app.py's ``st.navigation`` owns the pages. Until some session has
  called ``st.navigation``, Streamlit runs a deep link such as ``/space`` in its legacy
  ``pages/`` mode (the page file alone); ``pages._shared.restore_url`` then reruns it through
  app.py, so the first visit ran twice. Streamlit's own ``st.navigation`` sets the same flag
  on its first call. If a Streamlit release moves it, nothing breaks: restore_url's rerun
  still applies and only the first visit is slower.

A deep link (``/space``) made the browser log two 404s, ``/space/_stcore/health`` and
``/space/_stcore/host-config`` (streamlit/streamlit#7074): Streamlit's frontend does not
know the server's base URL, so it tries the page's own path as one first, then its parent,
after a 100-ms back-off. :func:`quiet_deep_links` puts the base URL in the page it serves
(``window.__streamlit.BACKEND_BASE_URL``, the frontend's setting for an embedded app), so
it asks the right one at once.

A link whose query string Streamlit drops whole (over 512 Ki characters or 1,000 fields:
``?balance=`` with 10^6 layer counts) reached no page, so none could say so (issue 38,
item 6); :func:`note_dropped_links` hands the pages a short note in its place
(``mcap.app.links``), which every page turns into one warning naming the keys.

It also makes the server stop (issue 38, item 8). After SIGTERM or SIGINT Streamlit logs
"Stopping..." and closes its port, but the interpreter then joins the worker threads of the
``poll`` file watcher (.streamlit/config.toml): one ThreadPoolExecutor whose queue holds a
0.2-s task per watched source file, each of which runs before the threads end (about 7 s on
this VM after a visit to one page, 35 s seen with every page visited), and SIGINT during
that join is swallowed by Streamlit's handler. :func:`stop_watchers` cancels that queue as
the server returns; children the pages started are reaped as they end
(``mcap.app.jobs``), so none stays ``<defunct>``.
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


# Before the frontend's bundle runs: the server's base URL (/ or server.baseUrlPath), so a
# deep link's first health check goes to the server, not to /<page>/_stcore/health.
_BASE_SCRIPT = ("<script>window.__streamlit = Object.assign({{BACKEND_BASE_URL: "
                "window.location.origin + {base}}}, window.__streamlit || {{}});</script>")


def with_base_url(html: str, base_url: str) -> str:
    """Streamlit's index.html with :data:`_BASE_SCRIPT` first in its head."""
    import json
    base = "/" + "/".join(p for p in (base_url or "").split("/") if p)
    script = _BASE_SCRIPT.format(base=json.dumps(base.rstrip("/") + "/"))
    return html.replace("<head>", "<head>" + script, 1)


def quiet_deep_links() -> bool:
    """Serve Streamlit's index.html with the base URL in it (:func:`with_base_url`), by
    wrapping the static-file handler Streamlit builds for its frontend. False, and nothing
    changed, when this Streamlit has no such handler (the 404s come back, nothing else)."""
    try:
        from starlette.responses import FileResponse, HTMLResponse
        from streamlit.web.server.starlette import starlette_static_routes as routes
    except ImportError:
        return False
    make = getattr(routes, "create_streamlit_static_handler", None)
    if make is None:
        return False
    if getattr(make, "mcap_base_url", False):
        return True

    def create(directory: str, base_url):
        handler = make(directory, base_url)
        index = Path(directory, "index.html").resolve()
        try:
            page = with_base_url(index.read_text(encoding="utf-8"), base_url or "")
        except OSError:
            return handler
        served = handler.get_response

        async def get_response(path, scope):
            response = await served(path, scope)
            if isinstance(response, FileResponse) and Path(response.path).resolve() == index:
                return HTMLResponse(page, status_code=response.status_code, headers={
                    "Cache-Control": response.headers.get("cache-control", "no-cache")})
            return response
        handler.get_response = get_response
        return handler
    create.mcap_base_url = True
    routes.create_streamlit_static_handler = create
    return True


def note_dropped_links() -> bool:
    """Where Streamlit drops a link's query string whole, give the pages
    ``mcap.app.links.note`` in its place (False, nothing changed, on a Streamlit without
    ``sanitize_query_string``: such a link then opens the defaults unsaid, as before)."""
    try:
        from streamlit.runtime import app_session
        from streamlit.runtime.state import query_params
    except ImportError:
        return False
    sanitize = getattr(query_params, "sanitize_query_string", None)
    if sanitize is None or getattr(sanitize, "mcap_note", False):
        return sanitize is not None
    from mcap.app.links import note
    limits = (getattr(query_params, "CLIENT_STATE_QUERY_STRING_MAX_LENGTH", 0),
              getattr(query_params, "CLIENT_STATE_QUERY_STRING_MAX_FIELDS", 0))

    def sanitized(query_string: str) -> str:
        kept = sanitize(query_string)
        return note(query_string, *limits) if query_string and not kept else kept
    sanitized.mcap_note = True
    query_params.sanitize_query_string = sanitized
    if getattr(app_session, "sanitize_query_string", None) is sanitize:
        app_session.sanitize_query_string = sanitized
    return True


def stop_watchers() -> None:
    """Let the interpreter end at once after the server stopped: cancel the queued polls of
    Streamlit's ``poll`` file watcher (its threads finish the one 0.2-s task each runs and
    end; a poll that reschedules itself after this is refused by the executor). Nothing to
    do when another watcher, or none, ran; a Streamlit release without this class is left
    as it is."""
    try:
        from streamlit.watcher.polling_path_watcher import PollingPathWatcher
    except ImportError:
        return
    executor = getattr(PollingPathWatcher, "_executor", None)
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)
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


def freeze_warm() -> None:
    """Move what :func:`warm` imported (about 125,000 objects: pandas, plotly's validators,
    Streamlit) out of the garbage collector's reach: they live as long as the server, and
    every full collection walked them again (issue 40 item 3)."""
    import gc
    gc.collect()
    gc.freeze()


def main(argv: list[str]) -> int:
    sys.path.insert(0, str(ROOT))
    warm()
    freeze_warm()
    prefetch_orders()
    try:
        from streamlit.runtime.pages_manager import PagesManager
        PagesManager.uses_pages_directory = False  # what st.navigation's first call sets
    except (ImportError, AttributeError):
        pass
    quiet_deep_links()
    note_dropped_links()
    from streamlit.web import cli
    try:  # click ends with sys.exit: the watchers are stopped on the way out
        return cli.main(args=["run", str(ROOT / "app.py"), *argv], prog_name="streamlit")
    finally:
        stop_watchers()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
