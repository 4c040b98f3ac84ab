"""Pipeline runtimes, one file each, registered in ``base`` (ARCHITECTURE.md). The order of
the imports is the order the CLI and the dashboard list them in; the first is the default."""
from mcap.runner.engines.base import (  # noqa: F401
    REGISTRY, Engine, across_nodes, get, names, plans_engine, register,
)
from mcap.runner.engines import pipelining, torchgpipe, hybrid  # noqa: F401  (registration)

DEFAULT = "pipelining"

__all__ = ["DEFAULT", "REGISTRY", "Engine", "across_nodes", "get", "names", "plans_engine",
           "register"]
