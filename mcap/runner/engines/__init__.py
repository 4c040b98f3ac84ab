"""Pipeline runtimes, one file each, registered in ``base`` (ARCHITECTURE.md). The order of
the imports is the order the CLI and the dashboard list them in; the first is the default."""
from mcap.runner.engines.base import Engine, get, names, register
from mcap.runner.engines import pipelining, torchgpipe, hybrid  # noqa: F401  (registration)

DEFAULT = "pipelining"

__all__ = ["DEFAULT", "Engine", "get", "names", "register"]
