"""The executor registry (issue 42; ARCHITECTURE.md, "Registries"): where the stage-alone
measurements of a command run. ``local`` is this machine's pool of stage processes (the
default); ``ray`` and ``slurm`` send each measurement to a cluster as a task of its own, in
a fresh process (``mcap.runner.fresh``), and bring its result back to the driver, which
alone writes the store.

Chosen with ``--executor NAME`` or ``$MCAP_EXECUTOR``; each executor's options are flags of
its class (:class:`Flag`), each with an environment variable, so every command that
measures and the dashboard's jobs read one configuration (``configured``). Importing this
package imports neither torch nor ray nor submitit.

An executor's capabilities are flags on its class, never its name:

- ``remote``: each measurement is a task in a fresh process, perhaps on another machine
  (``pool`` returns a :class:`mcap.runner.executors.remote.RemotePool`); stages that run
  together (``--isolation pipeline``, engine torchgpipe) need the local pool.
- ``needs``: the Python module it imports (``ray``, ``submitit``), named when missing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar, Optional

from mcap.core.errors import McapError
from mcap.core.registry import Registry
from mcap.core.types import Setup

ENV = "MCAP_EXECUTOR"


@dataclass(frozen=True)
class Flag:
    """One option of an executor: ``--ray-address`` on the command line, ``$MCAP_RAY_ADDRESS``
    in the environment. ``kind``: ``text``, ``count`` (a whole number >= 1, or >= 0 with
    ``zero``) or ``minutes`` (a number > 0)."""
    option: str
    env: str
    help: str
    metavar: str = "X"
    kind: str = "text"
    default: object = None
    zero: bool = False

    @property
    def dest(self) -> str:
        return self.option.lstrip("-").replace("-", "_")

    def parse(self, text: str, where: str):
        """``text`` as this flag's value; McapError naming ``where`` (the option or the
        variable) and the value otherwise."""
        text = str(text).strip()
        if self.kind == "text":
            if not text:
                raise McapError(f"{where} is empty")
            return text
        try:
            value = float(text) if self.kind == "minutes" else int(text)
        except ValueError:
            value = None
        low = 0 if self.zero else 1
        if self.kind == "minutes":
            if value is None or not 0 < value <= 10**6:
                raise McapError(f"{where} {text!r:.40} is not a number of minutes > 0")
        elif value is None or not low <= value <= 10**6:
            raise McapError(f"{where} {text!r:.40} is not a whole number >= {low}")
        return value


# Options every remote executor takes (its own add to them).
RETRIES = Flag("--retries", "MCAP_RETRIES", "times a task is sent again after its process or "
               "node was lost (default 2); then it is stored as failed, with its node and "
               "error", "N", "count", 2, zero=True)
QUEUE_TIMEOUT = Flag("--queue-timeout", "MCAP_QUEUE_TIMEOUT", "minutes tasks may wait in the "
                     "queue with none of them starting before the command says so and exits 2 "
                     "(default 10)", "MIN", "minutes", 10.0)


@dataclass(frozen=True)
class Settings:
    """An executor's option values (``Flag.dest`` -> value), from the environment."""
    values: tuple[tuple[str, object], ...] = ()

    def get(self, dest: str, default=None):
        for k, v in self.values:
            if k == dest:
                return v
        return default


class Executor:
    """One way to run stage-alone measurements (see the module docstring)."""
    name: ClassVar[str] = ""
    label: ClassVar[str] = ""
    help: ClassVar[str] = ""
    remote: ClassVar[bool] = False
    needs: ClassVar[Optional[str]] = None
    flags: ClassVar[tuple[Flag, ...]] = ()

    def settings(self, env=None) -> Settings:
        """This executor's options as the environment sets them (defaults otherwise)."""
        env = os.environ if env is None else env
        out = []
        for flag in self.flags:
            raw = env.get(flag.env)
            value = flag.default if raw is None or not raw.strip() else flag.parse(raw, flag.env)
            out.append((flag.dest, value))
        return Settings(tuple(out))

    def check(self, settings: Settings) -> None:
        """Refuse, before anything starts, what this executor cannot run here (exit 2),
        naming the executor and what is missing. The base checks ``needs``."""
        if self.needs is None:
            return
        import importlib.util
        try:
            found = importlib.util.find_spec(self.needs) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise McapError(f"executor {self.name} needs the Python package {self.needs}, "
                            f"which is not importable here (pip install -r requirements.txt "
                            f"pins it); or use --executor local")

    def check_setup(self, setup: Setup, together: bool) -> None:
        """Refuse a setup this executor cannot measure; ``together``: the runner runs the
        stages together (a remote executor runs each stage alone, as a task)."""
        if self.remote and together:
            raise McapError(f"executor {self.name} measures each stage alone, as a task of "
                            "its own; stages that run together (--isolation pipeline, engine "
                            "torchgpipe, an MPress plan with d2d) run on this machine: use "
                            "--executor local")

    def pool(self, spec: str, setup: Setup, settings: Settings, *, world: int, timeout: float,
             startup_timeout: float, group: bool, alone: bool):
        """The runner's pool (``mcap.runner.pool.WorkerPool``'s interface)."""
        raise NotImplementedError


REGISTRY: Registry[Executor] = Registry("executor")
register = REGISTRY.register


def get(name: str) -> Executor:
    return REGISTRY.get(name)


def names() -> tuple[str, ...]:
    return REGISTRY.names()


def chosen_name() -> str:
    """``$MCAP_EXECUTOR``, or the default (the first registered: local)."""
    name = (os.environ.get(ENV) or "").strip() or names()[0]
    if name not in REGISTRY:
        raise McapError(f"{ENV}={name!r:.40} is not an executor; expected one of "
                        f"{', '.join(names())}")
    return name


def configured() -> tuple[Executor, Settings]:
    """The executor this process measures with and its options (``$MCAP_EXECUTOR`` and
    each flag's variable; the CLI sets them for the duration of a command)."""
    executor = get(chosen_name())
    return executor, executor.settings()


def all_flags() -> tuple[Flag, ...]:
    """Every executor's flags once each, in registration order (the CLI adds them all)."""
    seen, out = set(), []
    for executor in REGISTRY:
        for flag in executor.flags:
            if flag.option not in seen:
                seen.add(flag.option)
                out.append(flag)
    return tuple(out)
