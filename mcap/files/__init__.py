"""Files mcap writes, and the paths it is given: one set of rules for every writer (issue 38).

A results store and its neighbours, the recovery file, ``--out`` files, the machine cache,
job logs and lock files are all opened here (:mod:`mcap.files.owned`), and every path a
person gives (an option, an environment variable) is checked here before the system sees it
(:mod:`mcap.files.paths`). A layer of its own under every layer that writes (store, io,
runner, workflow, app, cli); it imports only ``mcap.core`` (its errors).
"""
from mcap.files.owned import UnsafeFile, check, folder, open_fd, replace  # noqa: F401
from mcap.files.paths import BadPath, checked, shown  # noqa: F401
