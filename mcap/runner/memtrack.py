"""Byte-exact peak memory of PyTorch tensors on the CPU, the way a GPU's allocator reports it.

On CUDA a stage's peak is ``torch.cuda.max_memory_allocated`` (mCAP 3.5: allocated bytes,
not reserved ones). A CPU stage process has no such counter, so :func:`install` wraps
PyTorch's CPU allocator (``mcap/runner/_memtrack.cpp``) with one that counts the bytes every
tensor storage asks for: :func:`current`, :func:`peak`, :func:`reset_peak`.

    from mcap.runner import memtrack
    memtrack.install()                  # before building the model
    memtrack.reset_peak()
    ... train ...
    memtrack.peak()                     # int bytes, exact

- Storages allocated before ``install()`` (or under :func:`suspended`) are not counted, and
  freeing them later does not disturb the counts.
- ``set_capacity(bytes)`` makes an allocation that would exceed the capacity raise
  ``torch.OutOfMemoryError`` (the class a CUDA OOM raises), so CPU runs fail like a full GPU.
- Each allocation has a category (:data:`OTHER`, :data:`WEIGHTS`, :data:`GRADIENTS`,
  :data:`OPTIMIZER`): the one set by :func:`tagged` when it was allocated, or the one given
  later by :func:`retag`. :func:`peak_breakdown` is the bytes per category at the moment
  the peak was reached; it sums to the peak.

Only tensor storages are counted: not Python objects, not the interpreter, not gloo's own
socket buffers. That is the same boundary ``max_memory_allocated`` draws on a GPU.

The extension is compiled once per environment with ninja (about 20 s the first time), in
``$TORCH_EXTENSIONS_DIR`` (default ``<repo>/.venv/torch_extensions``, or
``~/.cache/mcap/torch_extensions`` without a repository venv); a file lock lets
several stage processes start at once without compiling over each other.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.util
import os
from pathlib import Path
from types import ModuleType
from typing import Iterator, Optional

from mcap.files import owned

OTHER, WEIGHTS, GRADIENTS, OPTIMIZER = 0, 1, 2, 3
CATEGORIES = ("other", "weights", "gradients", "optimizer")

_SOURCE = Path(__file__).with_name("_memtrack.cpp")
_ext: Optional[ModuleType] = None


def _extensions_dir() -> Path:
    env = os.environ.get("TORCH_EXTENSIONS_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    if (repo / ".venv").is_dir():
        return repo / ".venv" / "torch_extensions"
    return Path.home() / ".cache" / "mcap" / "torch_extensions"  # an installed mcap


def _load() -> ModuleType:
    """Compile (once) and import the extension; the name carries the source hash, so an
    edited source builds a fresh module instead of loading a stale one."""
    global _ext
    if _ext is not None:
        return _ext
    import torch

    digest = hashlib.sha256(_SOURCE.read_bytes() + torch.__version__.encode()).hexdigest()[:12]
    name = f"mcap_memtrack_{digest}"
    build = _extensions_dir() / name
    build.mkdir(parents=True, exist_ok=True)
    built = build / f"{name}.so"
    # Never through a link planted there (mcap.files.owned, issue 38); its bytes are never
    # read or written, so whose it is does not matter.
    lock = owned.open_fd(build / ".mcap.lock", os.O_RDWR | os.O_CREAT, "memtrack's build lock",
                         owner=False)
    with os.fdopen(lock, "r+b"):
        # torch's own build lock is a polled file left behind by a killed compiler; an
        # flock dies with its holder.
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if built.exists():
                spec = importlib.util.spec_from_file_location(name, built)
                module = importlib.util.module_from_spec(spec)
                spec.loader.exec_module(module)
            else:
                # torch's baton (``lock``) left by a compiler killed mid-build makes every
                # later build wait on it forever; under this flock no builder is alive, so
                # one found here is stale (a stage process killed during the first compile)
                stale = build / "lock"
                if stale.is_file() and not stale.is_symlink():
                    stale.unlink()
                from torch.utils import cpp_extension  # (setuptools: only to build)
                module = cpp_extension.load(name, [str(_SOURCE)], build_directory=str(build),
                                            extra_cflags=["-O2"], verbose=False)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    _ext = module
    return module


def load() -> None:
    """Compile (once per environment) and load the extension without installing it: the
    zygote (``mcap.runner.zygote``) loads it once for every stage process it forks."""
    _load()


def install() -> None:
    """Route every later CPU tensor allocation of this process through the counter.

    Idempotent. Call it before building the model: what was allocated before is not counted.
    """
    _load().install()
    _count_storage_copies()


_copies_counted = False


def _count_storage_copies() -> None:
    """Count storages that torch makes outside the registered CPU allocator.

    ``torch.UntypedStorage(nbytes)`` takes c10's *default* CPU allocator, not the one
    registered at a higher priority (this tracker), and ``copy.deepcopy`` of a plain tensor
    clones its storage that way (``_StorageBase.clone``). So a deep-copied stage's
    BatchNorm running statistics went uncounted (0-84 KB per AmoebaNet-D stage, issue 25),
    while its parameters (``Parameter.__deepcopy__`` clones the tensor) were counted. A CPU
    storage's clone now allocates through ``torch.empty``, which takes the registered one;
    other devices keep torch's own clone."""
    global _copies_counted
    if _copies_counted:
        return
    import torch
    from torch.storage import _StorageBase

    original = _StorageBase.clone

    def clone(self):
        if self.device.type != "cpu":
            return original(self)
        fresh = torch.empty((self.nbytes(),), dtype=torch.uint8).untyped_storage()
        out = type(self)(fresh) if type(self) is not type(fresh) else fresh
        return out.copy_(self)

    clone.__doc__ = original.__doc__
    _StorageBase.clone = clone
    _copies_counted = True


def installed() -> bool:
    return _ext is not None and _ext.installed()


def _need() -> ModuleType:
    if not installed():
        raise RuntimeError("mcap.runner.memtrack: call install() first")
    return _ext


def current() -> int:
    """Bytes held now by tensor storages allocated since install()."""
    return int(_need().current())


def peak() -> int:
    """Highest :func:`current` since install() or the last :func:`reset_peak`."""
    return int(_need().peak_bytes())


def reset_peak() -> None:
    """Start a new measuring window: the peak becomes the current bytes."""
    _need().reset_peak()


def set_capacity(nbytes: Optional[int]) -> None:
    """Make allocations beyond ``nbytes`` held raise ``torch.OutOfMemoryError``; None lifts it."""
    if nbytes is not None and nbytes <= 0:
        raise ValueError(f"capacity must be a positive number of bytes, got {nbytes}")
    _need().set_capacity(int(nbytes or 0))


def capacity() -> Optional[int]:
    return int(_need().get_capacity()) or None


def is_capacity_error(exc: BaseException) -> bool:
    """True for the error an allocation over :func:`set_capacity` raises."""
    return "mcap memtrack: out of memory" in str(exc)


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """Allocate without counting: for things that are not part of what is measured (a cached
    copy of the whole model from which stages are cloned). Freeing them later is not counted
    either."""
    ext = _need()
    ext.set_suspended(True)
    try:
        yield
    finally:
        ext.set_suspended(False)


@contextlib.contextmanager
def tagged(category: int) -> Iterator[None]:
    """Give allocations made inside the block ``category`` (e.g. OPTIMIZER around
    ``optimizer.step()``)."""
    ext = _need()
    old = ext.set_tag(category)
    try:
        yield
    finally:
        ext.set_tag(old)


def retag(tensor, category: int) -> bool:
    """Count ``tensor``'s storage under ``category`` from now on. False when the storage is not
    the tracker's (allocated before install, suspended, or not on the CPU)."""
    return bool(_need().retag(tensor, category))


def storage_use_count(tensor) -> int:
    """How many tensors and views hold ``tensor``'s storage (0 without one), read without
    giving the storage a Python object (``mcap.runner.capture.settling.references``). Needs
    :func:`load` only, not :func:`install`."""
    return int(_load().storage_use_count(tensor))


def current_breakdown() -> tuple[int, int, int, int]:
    """Bytes now per category, in :data:`CATEGORIES` order."""
    return tuple(int(v) for v in _need().current_by_category())


def peak_breakdown() -> tuple[int, int, int, int]:
    """Bytes per category at the moment of the peak, in :data:`CATEGORIES` order."""
    return tuple(int(v) for v in _need().peak_by_category())
