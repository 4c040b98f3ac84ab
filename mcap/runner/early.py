"""A zygote started before the command line is read (issue 42, item 6).

A one-off ``python -m mcap measure`` spends its first half second importing the CLI and
reading its arguments, and only then starts the pool's zygote, which spends about two
torch imports (torch, then ``torch.distributed.pipelining``, which pulls in sympy) before
the first stage process can fork. ``python -m mcap`` calls :func:`maybe_start` first: for a
command that will measure on this machine's CPU it starts the zygote at once, with the
environment the pool would give it, and the pool adopts it (:func:`adopt`) when that
environment is still the one it would use; otherwise, and at exit, it is ended unused.

Nothing here imports torch or reads more than ``argv`` and the environment.
"""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence

from mcap.runner.machine import process_env
from mcap.runner.zygote import Zygote

COMMANDS = ("measure", "profile", "sweep", "scale")
_REPO = Path(__file__).resolve().parent.parent.parent
ZYGOTE_ENV = {"OPENBLAS_NUM_THREADS": "1"}  # as mcap.runner.pool.ZYGOTE_ENV
# Set by the command itself for its duration (mcap.cli.options): not the zygote's concern.
_OWN_KEYS = ("MCAP_ISOLATION", "MCAP_EXECUTOR")
# Set by torch itself once the command's process has imported torch._inductor (building a
# model on the meta device does, through torch._refs and torch._dynamo), to the folder the
# zygote's own import of torch sets when unset: the same in both, not a difference.
_TORCH_KEYS = ("TORCHINDUCTOR_CACHE_DIR",)

_early: Optional[tuple[dict, Zygote, str]] = None  # (environment, zygote, its folder)


def pool_env(threads: int, base: Optional[dict] = None) -> dict:
    """The environment a pool's zygote starts with (``WorkerPool.start``)."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_REPO), os.getcwd(), env.get("PYTHONPATH", "")) if p)
    env.update(process_env(threads))
    env.update(ZYGOTE_ENV)
    return env


def _comparable(env: dict) -> dict:
    return {k: v for k, v in env.items()
            if k not in _OWN_KEYS + _TORCH_KEYS and not k.startswith(("MCAP_RAY_", "MCAP_SLURM_"))
            and k not in ("MCAP_RETRIES", "MCAP_QUEUE_TIMEOUT")}


def _threads(argv: Sequence[str]) -> Optional[int]:
    for i, a in enumerate(argv):
        text = argv[i + 1] if a == "--threads" and i + 1 < len(argv) else \
            a.split("=", 1)[1] if a.startswith("--threads=") else None
        if text is not None:
            return int(text) if text.isdigit() and int(text) >= 1 else None
    return 1


def _value(argv: Sequence[str], flag: str) -> Optional[str]:
    for i, a in enumerate(argv):
        if a == flag and i + 1 < len(argv):
            return argv[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def wanted(argv: Sequence[str]) -> Optional[int]:
    """The threads of the zygote this command line will fork its CPU stage processes
    from, or None when it will not (another command, CUDA, a cluster, torchrun, help)."""
    if not argv or argv[0] not in COMMANDS or not hasattr(os, "fork"):
        return None
    if any(a in ("-h", "--help") or a.startswith("--nnodes") for a in argv):
        return None
    if (_value(argv, "--device") or "cpu") != "cpu":
        return None
    from mcap.runner.executors.base import ENV, REGISTRY, names
    name = _value(argv, "--executor") or os.environ.get(ENV) or names()[0]
    if name not in REGISTRY or REGISTRY.get(name).remote or \
            os.environ.get("MCAP_STAGE_START") == "spawn":
        return None
    return _threads(argv)


def maybe_start(argv: Sequence[str]) -> None:
    """Start the zygote now when ``argv`` (``python -m mcap``'s arguments) will use one."""
    global _early
    threads = wanted(argv)
    if threads is None or _early is not None:
        return
    folder = tempfile.mkdtemp(prefix="mcap-zygote-")
    env = pool_env(threads)
    try:
        zygote = Zygote(env, str(_REPO), os.path.join(folder, "zygote.log"))
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        return
    _early = (env, zygote, folder)
    atexit.register(_discard)


def adopt(env: dict) -> Optional[tuple[Zygote, str]]:
    """The early zygote and its folder when it started with ``env`` (but for what the
    command sets for itself) and still runs; None otherwise (it is then ended)."""
    global _early
    if _early is None:
        return None
    early_env, zygote, folder = _early
    if _comparable(early_env) != _comparable(env) or zygote.dead or zygote.refused:
        _discard()
        return None
    _early = None
    return zygote, folder


def _discard() -> None:
    """End an early zygote nobody adopted (bad input, another executor) without waiting."""
    global _early
    if _early is None:
        return
    _, zygote, folder = _early
    _early = None
    zygote.close(quit_first=False)
    shutil.rmtree(folder, ignore_errors=True)
