"""Values read from JSON, checked one by one (a file is data: types, ranges, lengths), each
refusal raised through the caller's ``fail(where, message)`` so the message names the file
and the key. Shared by the profile's extra statistics (``mcap.core.capture.variantsjson``,
``mcap.core.press.statsjson``); the records' own fields are ``mcap.core.fields``."""
from __future__ import annotations

import math
from typing import Any, Optional

MAX_BYTES = 2**50
MAX_DEGREE = 2**16
MAX_BATCH = 2**31
MAX_RATE = 1e15  # bytes per second
MAX_SECONDS = 1e9


def show(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def int_(v, where, fail, low, high, nullable=False):
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise fail(where, f"expected an integer, found {show(v)}")
    if not low <= v <= high:
        raise fail(where, f"{show(v)} is out of range [{low:,}, {high:,}]")
    return v


def num(v, where, fail, high):
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise fail(where, f"expected a number, found {show(v)}")
    try:
        f = float(v)
    except OverflowError:  # an int beyond float's range
        f = math.inf
    if math.isnan(f) or not 0 <= f <= high:
        raise fail(where, f"expected a finite number between 0 and {high:g}, found {show(v)}")
    return f


def list_(v, where, fail, length: Optional[int] = None) -> list:
    if not isinstance(v, list):
        raise fail(where, f"expected a list, found {show(v)}")
    if length is not None and len(v) != length:
        raise fail(where, f"expected {length} entries (one per layer), found {len(v)}")
    return v


def obj(v, where, fail) -> dict:
    if not isinstance(v, dict):
        raise fail(where, f"expected an object, found {show(v)}")
    return v


def need(d: dict, key: str, where: str, fail):
    if key not in d:
        raise fail(where, f"missing key {key!r}")
    return d[key]
