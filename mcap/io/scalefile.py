"""Reading and writing ``mcap.scale/1`` files (atomic writes, like every mcap JSON)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from mcap.core.errors import SchemaError
from mcap.core.scaling import Scaling, from_dict, to_dict
from mcap.io.jsonio import write_text_atomic


def save(s: Scaling, path: Union[str, Path]) -> Path:
    return write_text_atomic(Path(path), json.dumps(to_dict(s), indent=1) + "\n")


def load(path: Union[str, Path]) -> Scaling:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SchemaError(f"{path}: cannot read ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        d = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # huge integers, deep nesting
        raise SchemaError(f"{path}: not usable JSON ({type(exc).__name__})") from None
    return from_dict(d, str(path))
