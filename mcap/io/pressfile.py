"""Reading and writing ``mcap.press/1`` plan files (``mcap.core.pressplan``; atomic writes,
like every mcap JSON). ``press --out`` writes them, ``measure --press`` reads them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from mcap.core.errors import SchemaError
from mcap.core.pressplan import PressPlan, plan_from_json, plan_to_json
from mcap.io.jsonio import write_text_atomic


def save(plan: PressPlan, path: Union[str, Path]) -> Path:
    return write_text_atomic(Path(path), json.dumps(plan_to_json(plan), indent=1) + "\n")


def load(path: Union[str, Path]) -> PressPlan:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:
        raise SchemaError(f"{path}: not usable JSON ({type(exc).__name__})") from None
    return plan_from_json(d)
