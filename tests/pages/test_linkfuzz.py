"""A fast subset of bench/bench_fuzz.py's dashboard-link fuzzer (issue 38, item 6): links
whose one shared key holds a hostile or mutated value, on the pages that read it. No
exception box, and no value replaced without a warning naming the key."""
from __future__ import annotations

import random

import pytest

from pages._state import SHARED_KEYS
from tests.pages import linkfuzz

pytestmark = pytest.mark.app


@pytest.fixture(autouse=True, scope="module")
def _dropped_links_noted():
    from streamlit.runtime import app_session
    from streamlit.runtime.state import query_params
    saved = (query_params.sanitize_query_string, app_session.sanitize_query_string)
    linkfuzz.note_dropped_links()
    yield
    query_params.sanitize_query_string, app_session.sanitize_query_string = saved


def test_every_shared_key_has_pages_that_read_it():
    assert set(linkfuzz.PAGES) == set(SHARED_KEYS)


# the issue's examples, each on the page that showed it, and a few per key
CASES = [("layers", "profile", "../../etc/passwd", {}), ("overview", "profile", "upload:x@y", {}),
         ("predict", "sweep", "store:sweep:99", {}), ("scaling", "scale", "bundled:" + "a" * 5000, {}),
         ("layers", "profile", "bundled:a\x00b.profile.json", {}),
         ("predict", "balance", ",".join(["1"] * 10**6), {}),
         ("recommend", "method", "time", {})]


@pytest.mark.parametrize("page,key,value,extra", CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_the_issues_examples_are_said(tmp_store, page, key, value, extra):
    assert linkfuzz.check(page, key, value, extra) is None


@pytest.mark.parametrize("key", SHARED_KEYS)
def test_mutated_values_of_each_key(tmp_store, key):
    rng = random.Random(f"test:{key}")
    pages = linkfuzz.PAGES[key]
    found = [linkfuzz.check(*pages[i % len(pages)][:1], key, v, pages[i % len(pages)][1])
             for i, v in enumerate(rng.sample(linkfuzz.values(key, 24, rng), 3))]
    assert not [f for f in found if f], found
