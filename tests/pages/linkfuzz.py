"""Seeded mutations of dashboard links, one shared key at a time (issue 38, item 6), and the
check each page must pass: no exception box, and no silent replacement (a value the page
does not use as given is said in one warning naming the key). Used by
tests/pages/test_linkfuzz.py (a fast subset) and bench/bench_fuzz.py (--only links, >= 500
values). AppTest opens the page a link names as its first run, as a browser does."""
from __future__ import annotations

import random
from typing import Callable, Optional

from tests.conftest import APP

PRESS = "bundled:vgg11-b8-never-cpu4-press.profile.json"
GPT2 = "bundled:gpt2-l12-h256-s256-cpu4.profile.json"

# key -> the pages that read it, each with the rest of the link that makes it read it
PAGES: dict[str, tuple[tuple[str, dict], ...]] = {
    "profile": (("overview", {}), ("layers", {}), ("predict", {}), ("space", {}),
                ("recommend", {}), ("hybrid", {}), ("savers", {}), ("explained", {}),
                ("present", {})),
    "sweep": (("overview", {}), ("predict", {}), ("space", {}), ("recommend", {}),
              ("present", {}), ("explained", {})),
    "stages": (("recommend", {}), ("predict", {"pick": "per-stage"}),
               ("predict", {"pick": "recommended"})),
    "method": (("recommend", {}), ("predict", {"pick": "recommended"})),
    "predictor": (("predict", {}), ("recommend", {}), ("space", {}), ("hybrid", {}),
                  ("savers", {"profile": PRESS})),
    "seed": (("recommend", {"method": "bo"}),),
    "balance": (("predict", {}), ("space", {}), ("savers", {"profile": PRESS}),
                ("explained", {})),
    "schedule": (("explained", {}),),
    "scale": (("scaling", {}),),
    "mesh": (("hybrid", {}),),
    "plan": (("hybrid", {}),),
    "chunks": (("explained", {}),),
    "capacity": (("predict", {}),),
    "plan_capacity": (("savers", {"profile": PRESS}), ("explained", {"profile": PRESS})),
    "planner": (("savers", {"profile": PRESS}), ("explained", {"profile": PRESS})),
    "plan_device": (("explained", {"profile": PRESS}),),
    "iterations": (("recommend", {"method": "bo"}),),
    "estimates": (("space", {}),),
}

_HOSTILE = ["", " ", "\x00", "a\x00b", "../../etc/passwd", "/etc/passwd", "%00", "-1", "0", "1",
            "1e400", "nan", "inf", "-inf", "1.5", "٣", "²", "9" * 40, "x" * 5000, "<script>",
            "'; DROP TABLE runs; --", "None", "null", "true", "[]", "{}", "1,2", "\u202e",
            "🙂", "\n", "\t1", "0x10", "1_000", "+4", " 4 "]
_KEYED = {
    "profile": ["bundled:vgg11-h512-b8-cpu4.profile.json", GPT2, PRESS, "bundled:../x",
                "bundled:nope.profile.json", "bundled:vgg11-h512-b8-cpu4-full.sweep.json",
                "store:profile:1", "store:profile:0", "store:profile:99999999999999999999",
                "store:sweep:1", "upload:x@y", "upload:", "bundled:", "bundled:.", "store:",
                "bundled:" + "a" * 300, "bundled:PROVENANCE.md"],
    "sweep": ["bundled:vgg11-h512-b8-cpu4-full.sweep.json",
              "bundled:gpt2-l12-h256-s256-cpu4-full.sweep.json", "bundled:nope.sweep.json",
              "bundled:vgg11-h512-b8-cpu4.profile.json", "store:sweep:7", "store:sweep:-1",
              "upload:a.sweep.json@0123456789ab", "bundled:../../etc/passwd"],
    "balance": ["3,3,5,19", "16,1,5,8", "30", "1,1,1,27", "3,3,5,18", "3,3,5,20", "0,10,10,10",
                "-3,3,5,25", "3;3;5;19", "3,,5,19", ",".join(["1"] * 30),
                ",".join(["1"] * 10 ** 5), "3.0,3,5,19", "1e1,10,5,5"],
    "method": ["exact", "bf", "bo", "time", "uniform", "params", "EXACT", "mcap"],
    "predictor": ["paper", "maxparam", "perstage", "workspace", "Paper", "toy"],
    "stages": ["1", "2", "4", "30", "31", "1000000", "4.0", "٤"],
    "seed": ["0", "7", "1000000", "1000001", "-5"],
    "iterations": ["2", "75", "500", "501", "1"],
    "schedule": ["gpipe", "1f1b", "GPipe", "interleaved", "zb"],
    "scale": ["amoebanet-d-cpu4.scale.json", "amoebanet-d-cpu4-profcap.scale.json",
              "bundled:amoebanet-d-cpu4.scale.json", "nope.scale.json", "../data/x"],
    "mesh": ["1x4", "2x2", "1x1", "0x4", "4", "2x2x2", "1x100000", "999999x999999"],
    "plan": ["16,1,5,8", "3,3,10:tp2", "30", "10:dp2,20:dp2", "15:tp65536,15", "3,3,5,19:xp2",
             "1,1,1,1,1"],
    "chunks": ["1", "4", "8", "9", "0", "100"],
    "capacity": ["0", "64", "256.5", "-64", "1e9", "1e10"],
    "plan_capacity": ["0.01", "200", "389", "0", "-1", "1e10"],
    "planner": ["mpress", "milp", "MILP", "x"],
    "plan_device": ["0", "3", "4", "-1", "99"],
    "estimates": ["0", "1", "yes", "2"],
}


def values(key: str, count: int, rng: random.Random) -> list[str]:
    """``count`` values for ``key``: its own valid and near-valid ones, the hostile ones, and
    random mutations of both (a character changed, dropped or doubled, a prefix, a suffix)."""
    base = list(dict.fromkeys(_KEYED.get(key, []) + _HOSTILE))
    out = list(base[:count])
    while len(out) < count:
        v = rng.choice(base) or "x"
        kind = rng.choice(("change", "drop", "double", "prefix", "suffix", "repeat"))
        i = rng.randrange(len(v))
        if kind == "change":
            v = v[:i] + chr(rng.choice((rng.randrange(32, 127), rng.randrange(0x80, 0x3000)))) + v[i + 1:]
        elif kind == "drop":
            v = v[:i] + v[i + 1:]
        elif kind == "double":
            v = v[:i] + v[i] + v[i:]
        elif kind == "prefix":
            v = rng.choice(("bundled:", "store:", " ", "-", "0", "..")) + v
        elif kind == "suffix":
            v = v + rng.choice((",1", ".json", "x", " ", "\x00", "0" * 20))
        else:
            v = v * rng.randrange(2, 200)
        out.append(v)
    return out


def _same(key: str, a: Optional[str], b: Optional[str]) -> bool:
    """Whether the URL's value after the run, ``b``, is the link's ``a`` as the page writes it
    (4 for " 4", 3,3,5,19 for "3, 3, 5, 19", ...), i.e. not a replacement."""
    if a == b:
        return True
    if b is None:
        return key == "capacity" and _num(a) == 0.0
    if a is None:
        return False
    if key in ("stages", "seed", "iterations", "chunks", "plan_device",
               "capacity", "plan_capacity"):
        x, y = _num(a), _num(b)
        return x is not None and x == y
    if key == "balance":
        from mcap.core.partition import parse_balance
        try:
            return parse_balance(a) == parse_balance(b)
        except Exception:
            return False
    if key in ("mesh", "plan"):
        from mcap.core.capture.plan import parse_mesh, parse_plan
        parse = parse_mesh if key == "mesh" else parse_plan
        try:
            return parse(a).text == parse(b).text
        except Exception:
            return False
    return False


def _num(text) -> Optional[float]:
    try:
        return float(str(text))
    except ValueError:
        return None


def _said(at, key: str) -> bool:
    """A warning or an error that names the key (``not_usable``: "The link's key=..."), the
    note of a link the server dropped whole, or an error that names the refused value's
    kind and what is shown instead (Hybrid plans' "Showing the recommended plan ...
    instead")."""
    texts = [e.value for kind in ("warning", "error") for e in at.get(kind)]
    return any(f"{key}=" in t or "This link was not used" in t
               or ("instead" in t and key in t) for t in texts)


def note_dropped_links() -> None:
    """bin/serve.py's note for a query string Streamlit drops whole, in this process."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "mcap_serve", Path(__file__).resolve().parents[2] / "bin" / "serve.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.note_dropped_links()


def check(page: str, key: str, value: str, extra: dict, timeout: int = 60) -> Optional[str]:
    """Open ``page`` by a link with ``key=value`` (and ``extra``); a finding, or None."""
    from streamlit.testing.v1 import AppTest
    at = AppTest.from_file(APP, default_timeout=timeout)
    params = {**extra, key: value}
    for k, v in params.items():
        at.query_params[k] = v
    if page != "overview":
        at.switch_page(f"pages/{page}.py")
    try:
        at.run()
    except Exception as exc:  # a timeout or an AppTest failure is a finding too
        return f"{page} {key}={value[:40]!r}: {type(exc).__name__}: {str(exc)[:200]}"
    if at.exception:
        return f"{page} {key}={value[:40]!r}: exception box: {at.exception[0].value[:200]}"
    after = at.query_params.get(key)
    if isinstance(after, list):
        after = after[-1] if after else None
    if _same(key, value, after) or _said(at, key):
        return None
    if key == "plan" and after is None:  # the URL keeps a typed plan only; shown all the same
        shown = [m.value for m in at.metric if m.label == "shown plan"]
        if shown and _same("plan", value, shown[0]):
            return None
    return (f"{page} {key}={value[:40]!r}: silently replaced by "
            f"{(after or '')[:40]!r}")


def run(count: int, seed: int, progress: Optional[Callable] = None) -> tuple[dict, list[str]]:
    """``count`` links over every shared key (taken in turn, each on the pages that read it
    in turn): (per key: links tried, findings)."""
    from pages._state import SHARED_KEYS
    note_dropped_links()
    rng = random.Random(f"links:{seed}")
    per_key = max(1, -(-count // len(SHARED_KEYS)))
    tally, findings = {}, []
    for key in SHARED_KEYS:
        pages = PAGES[key]
        for i, value in enumerate(values(key, per_key, rng)):
            page, extra = pages[i % len(pages)]
            found = check(page, key, value, extra)
            tally[key] = tally.get(key, 0) + 1
            if found:
                findings.append(found)
            if progress:
                progress(key, i, found)
    return tally, findings
