"""Reading and writing ``mcap.scale/1`` files (atomic writes, like every mcap JSON)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Union

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


def compared_first(paths: Sequence[Union[str, Path]]) -> list[Path]:
    """Scaling files in the order a page offers them: the ones comparing the most
    partitioners first (the paper's comparison with ``time``, 4.3), then by name; a file that
    cannot be read goes last (the page names its error when it is chosen)."""
    def key(path):
        try:
            names = {r.partitioner for r in load(path).results}
        except SchemaError:
            return (1, 0, 0, Path(path).name)
        return (0, "time" not in names, -len(names), Path(path).name)
    return sorted((Path(p) for p in paths), key=key)
