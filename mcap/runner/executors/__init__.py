"""Executors, one file each, registered in ``base`` (issue 42; ARCHITECTURE.md, "Registries").
The order of the imports is the order the CLI and the dashboard list them in; the first,
``local``, is the default. Importing this package imports neither torch, ray nor submitit."""
from mcap.runner.executors.base import (  # noqa: F401
    ENV, REGISTRY, Executor, Flag, Settings, all_flags, chosen_name, configured, get, names,
    register,
)
from mcap.runner.executors import local, ray, slurm  # noqa: F401  (registration)

DEFAULT = "local"

__all__ = ["DEFAULT", "ENV", "REGISTRY", "Executor", "Flag", "Settings", "all_flags",
           "chosen_name", "configured", "get", "names", "register"]
