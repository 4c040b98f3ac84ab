"""Numbers written as text, one rule everywhere (issue 38, item 7): ASCII digits only.

Python's ``int()`` and ``float()`` take any Unicode decimal digit (``int("٣")`` is 3,
``float("١.٥")`` 1.5) and underscores (``int("1_000")``), and ``"²".isdigit()`` is True
while ``int("²")`` raises: ``--balance '٣,3,5,19'`` was taken while ``--layers ٣٠`` was
refused. Every count, size and id mcap reads from text (an option, a spec, an environment
variable, a query value) is read here: ``[+-]?[0-9]+`` for a whole number, the same with
a decimal point or an exponent for a real one, spaces around allowed. Pure.
"""
from __future__ import annotations

import re
from typing import Optional

MAX_DIGITS = 18  # a whole number beyond this is over every bound mcap has (< 2**63)
_WHOLE = re.compile(r"\s*([+-]?[0-9]+)\s*")
_REAL = re.compile(r"\s*([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?)\s*")


NOT_FINITE = ("inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan",
              "-nan")


def whole(text, max_digits: int = MAX_DIGITS) -> Optional[int]:
    """The whole number ``text`` writes in ASCII digits (at most ``max_digits``), else None."""
    m = _WHOLE.fullmatch(str(text))
    if not m or len(m.group(1).lstrip("+-")) > max_digits:
        return None
    return int(m.group(1))


def real(text) -> Optional[float]:
    """The number ``text`` writes in ASCII (``0.5``, ``1e-3``, ``3``; ``inf`` and ``nan`` as
    Python writes them, for the caller to refuse by name), else None."""
    if str(text).strip().lower() in NOT_FINITE:
        return float(str(text).strip())
    m = _REAL.fullmatch(str(text))
    return float(m.group(1)) if m else None
