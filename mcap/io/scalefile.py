"""Reading and writing ``mcap.scale/1`` files (atomic writes, like every mcap JSON)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence, Union

from mcap.core.errors import SchemaError
from mcap.core.scaling import Scaling, from_dict, reference, to_dict
from mcap.io.jsonio import read_json, write_text_atomic


def save(s: Scaling, path: Union[str, Path]) -> Path:
    return write_text_atomic(Path(path), json.dumps(to_dict(s), indent=1) + "\n")


# A scale file holds a grid and a few results: kilobytes (the grid is capped at
# mcap.core.scaling.MAX_GRID values). The Scaling page reads every one in the data folder.
MAX_SCALE_BYTES = 16 * 2**20


def load(path: Union[str, Path]) -> Scaling:
    """The scaling in ``path``; its size is capped before it is read (``read_json``)."""
    return from_dict(read_json(path, limit=MAX_SCALE_BYTES, what="an mcap.scale/1 file"),
                     str(path))


def compared_first(paths: Sequence[Union[str, Path]]) -> list[Path]:
    """Scaling files in the order a page offers them: the ones comparing the most
    partitioners first (the paper's comparison with ``time``, 4.3), then by name; a file that
    cannot be read goes last (the page names its error when it is chosen)."""
    def key(path):
        try:
            names = {r.partitioner for r in load(path).results}
        except SchemaError:
            return (1, 0, 0, Path(path).name)
        return (0, reference() not in names, -len(names), Path(path).name)
    return sorted((Path(p) for p in paths), key=key)
