"""Text from data files made fit for a page a room reads (issue 40, item 12): a record's
free text (a rank-agreement file's labels and note) names folders and scripts, which the
page leaves out; the file keeps them, and the exports show them whole. No streamlit."""
from __future__ import annotations

import re

# A token that is a path or a file a reader cannot open from the page: a/b, ../x, x.py
_PATH = re.compile(r"(?:\.\.?/|\b[\w.-]+/[\w./-]+|\b[\w-]+\.(?:py|md|json|sh|toml)\b)")


def plain(text: str) -> str:
    """``text`` without its parentheses that hold a path (or the path, where a parenthesis
    holds more) and without its clauses (split at "; ") that name one."""
    def paren(match) -> str:
        inner = match.group(1)
        parts = [p for p in (q.strip() for q in inner.split(",")) if p and not _PATH.search(p)]
        return f" ({', '.join(parts)})" if parts else ""
    text = re.sub(r"\s*\(([^()]*)\)", lambda m: paren(m) if _PATH.search(m.group(1)) else m.group(0),
                  str(text))
    clauses = [c for c in text.split("; ") if not _PATH.search(c)]
    out = "; ".join(clauses).strip()
    if out and text.rstrip().endswith(".") and not out.endswith("."):
        out += "."
    return out
