"""MPress plan files (``mcap.press/1``, ``mcap.core.pressplan``): read with every value
checked, written atomically."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Union

from mcap.core.pressplan import PressPlan, plan_from_json, plan_to_json
from mcap.core.errors import McapError
from mcap.io.jsonio import _read, write_text_atomic


def load_plan(path: Union[str, Path]) -> PressPlan:
    """The plan in ``path``; McapError naming the file and the value when it is not one."""
    try:
        return plan_from_json(_read(path))
    except McapError as exc:
        text = str(exc)
        raise McapError(text if text.startswith(str(path)) else f"{path}: {text}") from None


def save_plan(plan: PressPlan, path: Union[str, Path]) -> Path:
    return write_text_atomic(Path(path), json.dumps(plan_to_json(plan), indent=1) + "\n")
