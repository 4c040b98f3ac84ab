"""Every page at 1280x800 in a real browser (issue 40, item 13): no metric value or label,
chart title or annotation, or table column is cut off. Seen before: "27 ok o…",
"parameters 135.31 …", "9.39M par…", "ok with measured through…", a chart title ending
"every measured partitionin", the Memory savers table clipped on the right."""
from __future__ import annotations

import pytest

from tests.test_e2e_browser import _idle, browser, server  # noqa: F401 (fixtures)

# One xdist worker for the whole file: the module's dashboard server and browser were
# started once in each worker when its tests were split.
pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.xdist_group("e2e-layout")]
VIEWPORT = {"width": 1280, "height": 800}
# Every page, the Memory savers one on the bundled profile with MPress statistics.
PAGES_AT = ("", "layers", "predict", "space", "recommend", "hybrid", "scaling",
            "savers?profile=bundled:vgg11-b8-never-cpu4-press.profile.json",
            "explained", "present")

# What is cut off on the page, found by the browser's own layout.
CUT_OFF = """() => {
  const out = [];
  const clipped = el => el.scrollWidth > el.clientWidth + 1;
  for (const m of document.querySelectorAll('[data-testid="stMetric"]')) {
    for (const el of m.querySelectorAll('*')) {
      const s = getComputedStyle(el);
      if ((s.overflow === 'hidden' || s.textOverflow === 'ellipsis') && clipped(el)
          && el.innerText.trim()) {
        out.push('metric: ' + m.innerText.replace(/\\s+/g, ' ').trim());
        break;
      }
    }
  }
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    for (const t of plot.querySelectorAll('.gtitle, .annotation-text, .g-gtitle text')) {
      const r = t.getBoundingClientRect();
      if (r.width && (r.right > box.right + 1 || r.left < box.left - 1))
        out.push('chart text: ' + t.textContent.trim());
    }
  }
  for (const df of document.querySelectorAll('[data-testid="stDataFrame"]')) {
    const sc = df.querySelector('.dvn-scroller');
    if (sc && sc.scrollWidth > sc.clientWidth + 1)
      out.push('table: ' + (sc.scrollWidth - sc.clientWidth) + ' px of columns hidden');
  }
  return out;
}"""


@pytest.mark.parametrize("path", PAGES_AT, ids=[p.split("?")[0] or "overview" for p in PAGES_AT])
def test_nothing_is_cut_off_at_1280(browser, server, path):  # noqa: F811
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(f"{server}/{path}")
        _idle(page, 120_000)
        page.wait_for_function(
            "() => !document.querySelector('[data-testid=stSkeleton]') && "
            "[...document.querySelectorAll('[data-testid=stPlotlyChart]')]"
            ".every(c => c.querySelector('.js-plotly-plot'))", timeout=120_000)
        page.wait_for_timeout(800)  # fonts and the last chart's layout
        cut = page.evaluate(CUT_OFF)
        assert not cut, cut
    finally:
        page.close()
