"""Dashboard links that the server drops whole (issue 38, item 6). No streamlit here.

Streamlit ignores a query string longer than 512 Ki characters or of more than 1,000
fields before any page runs ("Ignoring query string ..." in the server's log only), so a
link such as ``?balance=`` with 10^6 layer counts opened the defaults without a word, and
no page could say which key it was. ``bin/serve.py`` hands the pages a short note in its
place, one query parameter :data:`DROPPED` (:func:`note`), which ``pages/_state.py`` turns
into one warning (:func:`sentence`) naming the keys and their sizes.
"""
from __future__ import annotations

from urllib.parse import unquote_plus, urlencode

DROPPED = "_mcap_link_dropped"
_KEYS_SHOWN = 8


def note(query_string: str, max_chars: int, max_fields: int) -> str:
    """The query string the pages get in place of one the server drops: ``DROPPED`` with
    the dropped one's size, the limits and its first keys with the length of each value
    (never a value itself)."""
    fields = query_string.count("&") + 1
    keys = []
    for part in query_string.split("&", _KEYS_SHOWN)[:_KEYS_SHOWN]:
        key, _, value = part.partition("=")
        key = "".join(c for c in unquote_plus(key[:200]) if c.isprintable())[:40] or "?"
        keys.append(f"{key}:{len(value)}")
    text = f"{len(query_string)};{fields};{max_chars};{max_fields};" + ",".join(keys)
    return urlencode({DROPPED: text})


def sentence(text: str) -> str:
    """The warning a page shows for :func:`note`'s value (a value another way cannot be
    read is said as it is, shortened)."""
    try:
        chars, fields, max_chars, max_fields, keys = text.split(";", 4)
        chars, fields, max_chars, max_fields = (int(x) for x in (chars, fields, max_chars,
                                                                   max_fields))
        named = []
        for item in keys.split(","):
            key, _, size = item.rpartition(":")
            named.append(f"{key}= ({int(size):,} characters)")
    except ValueError:
        return (f"This link's query string could not be read ({text[:80]!r}); showing the "
                "defaults instead.")
    why = (f"{chars:,} characters, over the server's limit of {max_chars:,}" if chars > max_chars
           else f"{fields:,} fields, over the server's limit of {max_fields:,}")
    more = "" if fields <= len(named) else f" and {fields - len(named):,} more"
    return (f"This link was not used: its query string is {why}, so the server dropped all "
            f"of it ({', '.join(named)}{more}). Showing the defaults instead.")
