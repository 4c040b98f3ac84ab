"""The results store (SQLite): profiles, runs, sweeps and jobs; see ``core.Store``.

``open_store()`` / ``Store(path)``; docs/store.md describes the file.
"""
from mcap.store.core import Store, open_store
from mcap.store.opening import default_store_path
from mcap.store.schema import APPLICATION_ID, SCHEMA_VERSION
from mcap.store.records import (JOB_STATUSES, RUN_KINDS, Job, RunRecord, Study,
                                StudySummary, Summary)

__all__ = ["Store", "open_store", "default_store_path", "APPLICATION_ID", "SCHEMA_VERSION",
           "JOB_STATUSES", "RUN_KINDS", "Job", "RunRecord", "Study", "StudySummary", "Summary"]
