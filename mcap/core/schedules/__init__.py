"""Pipeline schedules (issue 39): the registry (``base``), one file per schedule, and the
action list every consumer reads (``actions``). Importing this package registers them all,
in the order selectors list them."""
from mcap.core.schedules.base import (  # noqa: F401
    DEFAULT, MAX_VIRTUAL, REGISTRY, Schedule, get, names, rank_of_chunks, register,
)
from mcap.core.schedules import (  # noqa: F401  (registration, in selector order)
    gpipe, onef1b, interleaved, loopedbfs, zerobubble, zbv, dualpipev,
)

__all__ = ["DEFAULT", "MAX_VIRTUAL", "REGISTRY", "Schedule", "get", "names", "rank_of_chunks",
           "register"]
