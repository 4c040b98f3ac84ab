"""Reading and writing ``mcap.press/1`` plan files (``mcap.core.press.actions``): read with the
hardened JSON reader (size and depth limits) and every value checked, written atomically,
like every mcap JSON. ``press --out`` writes them, ``measure --press`` reads them."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from mcap.core.errors import McapError
from mcap.core.press.actions import PressPlan, plan_from_json, plan_to_json
from mcap.io.jsonio import _read, write_text_atomic


def save(plan: PressPlan, path: Union[str, Path]) -> Path:
    return write_text_atomic(Path(path), json.dumps(plan_to_json(plan), indent=1) + "\n")


def load(path: Union[str, Path]) -> PressPlan:
    """The plan in ``path``; McapError naming the file and the value when it is not one."""
    try:
        return plan_from_json(_read(path))
    except McapError as exc:
        text = str(exc)
        raise type(exc)(text if text.startswith(str(path)) else f"{path}: {text}") from None
