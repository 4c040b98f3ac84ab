"""How closely one device stands in for another (issue 11, item 6): the rank agreement of
two sweeps of the same partitionings (``mcap.core.evaluate.rank_agreement``), saved as a
small checked JSON file ``*.agreement.json`` (schema ``mcap.agreement/1``) next to the
bundled datasets, so the dashboard can state it without the sweeps themselves.

    {"schema": "mcap.agreement/1", "model": spec, "setup": "4 stages, batch 8, ...",
     "a": "CPU stage processes (...)", "b": "H100 (...)", "note": "...",
     "n", "spearman", "kendall", "best_ties", "best_ranks": [lo, hi],
     "best_ratios": [lo, hi], "top", "top_shared",
     "reverse": {...the same with a and b swapped...}, "command": "..."}
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Optional

from mcap.core.errors import SchemaError
from mcap.core.evaluate import RankAgreement
from mcap.io.jsonio import read_json, write_text_atomic

SCHEMA = "mcap.agreement/1"
SUFFIX = ".agreement.json"
MAX_AGREEMENT_BYTES = 2**20  # a few KB in practice; the dashboard reads every one
_TEXT = ("model", "setup", "a", "b", "note", "command")


def to_dict(ab: RankAgreement, ba: RankAgreement, **text: str) -> dict:
    out = {"schema": SCHEMA, **{k: str(text.get(k, "")) for k in _TEXT}}
    out.update(_stats(ab))
    out["reverse"] = _stats(ba)
    return out


def _stats(r: RankAgreement) -> dict:
    d = dataclasses.asdict(r)
    d["best_ranks"], d["best_ratios"] = list(r.best_ranks), list(r.best_ratios)
    return d


def save(d: dict, path: Path) -> Path:
    return write_text_atomic(Path(path), json.dumps(d, indent=1) + "\n")


def _check_stats(d, where: str, source: str) -> RankAgreement:
    def fail(msg):
        return SchemaError(f"{source}: {where}: {msg}")
    if not isinstance(d, dict):
        raise fail("expected an object")
    try:
        r = RankAgreement(n=int(d["n"]), spearman=float(d["spearman"]),
                          kendall=float(d["kendall"]), best_ties=int(d["best_ties"]),
                          best_ranks=tuple(int(v) for v in d["best_ranks"]),
                          best_ratios=tuple(float(v) for v in d["best_ratios"]),
                          top=int(d["top"]), top_shared=int(d["top_shared"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(f"missing or unreadable value ({exc})") from None
    if not (-1 <= r.spearman <= 1 and -1 <= r.kendall <= 1) or len(r.best_ranks) != 2 \
            or len(r.best_ratios) != 2 or r.n < 0 or not 0 <= r.top_shared <= r.top:
        raise fail("a value is out of range (correlations in [-1, 1], two ranks and ratios)")
    return r


def load(path: Path) -> dict:
    """The file's text fields plus ``stats`` and ``reverse`` as RankAgreement records."""
    path = Path(path)
    d = read_json(path, limit=MAX_AGREEMENT_BYTES, what="an mcap.agreement/1 file")
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise SchemaError(f"{path}: expected schema {SCHEMA!r}")
    out = {k: str(d.get(k, ""))[:2000] for k in _TEXT}
    out["stats"] = _check_stats(d, "top level", str(path))
    out["reverse"] = _check_stats(d.get("reverse"), "reverse", str(path))
    out["file"] = path.name
    return out


def bundled(data_dir: Path) -> list[dict]:
    """Every readable ``*.agreement.json`` in ``data_dir`` (an unreadable one is skipped:
    the page states what it can)."""
    out = []
    for p in sorted(Path(data_dir).glob(f"*{SUFFIX}")):
        try:
            out.append(load(p))
        except SchemaError:
            continue
    return out
