"""The results store: every measured run, profile, sweep and job, in one SQLite file.

``Store`` is one class made of one part per idea: the connection and its transactions
(``mcap.store.connection``), studies, runs, stage runs and machines
(``mcap.store.runs``), profiles and sweeps (``mcap.store.saved``) and the dashboard's jobs
(``mcap.store.jobs``). Nothing measured is ever lost: ``record_run`` is called as each run
finishes, inside its own transaction (``mcap.store.runs``).
"""
from __future__ import annotations

import os
from typing import Optional, Union

from mcap.store.connection import Connection
from mcap.store.jobs import Jobs
from mcap.store.runs import Runs, StudyRef  # noqa: F401  (StudyRef: importable here as before)
from mcap.store.saved import Saved


class Store(Jobs, Saved, Runs, Connection):
    """``Store(path=None)``: open (or create) the store at ``path``.

    ``path=None`` means ``$MCAP_STORE`` if set, else ``.mcap/store.sqlite`` under the
    current directory. A corrupt file, a non-SQLite file, another application's database
    or a store of another schema version raises ``StoreError`` and is left untouched.
    """


def open_store(path: Union[str, os.PathLike, None] = None, *,
               read_only: Optional[bool] = False) -> Store:
    """``Store(path, read_only=...)``; ``path=None`` is ``$MCAP_STORE`` or
    ``./.mcap/store.sqlite``."""
    return Store(path, read_only=read_only)
