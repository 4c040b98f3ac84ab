"""argparse types that refuse bad numbers with the value named (exit 2, never a traceback).

Shared by every command: counts that must be >= 1, seeds that must be >= 0, timeouts and
tolerances that must be finite, capacities that must be sizes a machine can have.
"""
from __future__ import annotations

import argparse
import math
import re
from decimal import Decimal, InvalidOperation

MAX_CAPACITY = 2**50  # 1 PiB per device: far above any accelerator, far below overflow
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9,
          "gb": 10**9, "t": 10**12, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30,
          "tib": 2**40, "pib": 2**50}


def _int(text: str, what: str) -> int:
    text = str(text).strip()
    if not re.fullmatch(r"[+-]?[0-9]{1,18}", text):
        raise argparse.ArgumentTypeError(f"{what} must be an integer, got {text!r}")
    return int(text)


def integer(text: str) -> int:
    """Any whole number in ASCII digits (``--low``, ``--node-rank``; ``mcap.core.numbers``:
    ``int()`` would take "٣" as 3)."""
    return _int(text, "the value")


def positive_int(text: str) -> int:
    """An integer >= 1 (stages, batch size, chunks, iterations, sample size)."""
    v = _int(text, "expected an integer >= 1;")
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {v}")
    return v


def bounded_int(high: int, flag: str, why: str = ""):
    """An argparse type: an integer 1 .. ``high``, refused naming ``flag`` and the bound
    before anything runs (a count that only sizes work: iterations, candidates)."""
    def parse(text: str) -> int:
        v = positive_int(text)
        if v > high:
            raise argparse.ArgumentTypeError(f"{flag} {v:,} is above the limit of {high:,}"
                                             + (f" ({why})" if why else ""))
        return v
    parse.__name__ = flag.lstrip("-").replace("-", "_")
    return parse


def out_path(text: str):
    """``--out FILE``: a path, never empty (``Path("")`` would be ".", the current folder),
    nor one no file can have (too long, a NUL: ``mcap.files.paths``)."""
    if not str(text).strip():
        raise argparse.ArgumentTypeError("--out is empty; give a file name such as result.json")
    return _path(text)


def _path(text: str):
    from mcap.files import paths
    try:
        return paths.checked(text, "the path")
    except paths.BadPath as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def in_path(text: str) -> str:
    """A file the command reads or opens (``--profile``, ``--sweep``, ``--store``,
    ``--press``): refused as text when no file can have it (empty, too long, a NUL; issue
    38), before ``Path("")`` becomes the current folder or ``os.stat`` raises."""
    return str(_path(text))


def seed(text: str) -> int:
    """A seed: an integer 0 .. 2**32 - 1 (numpy's and skopt's range)."""
    v = _int(text, "the seed")
    if not 0 <= v < 2**32:
        raise argparse.ArgumentTypeError(f"the seed must be between 0 and {2**32 - 1}, got {text!r}")
    return v


def _float(text: str, what: str) -> float:
    from mcap.core import numbers
    v = numbers.real(text)  # ASCII digits only: float("٣") would be 3.0
    if v is None:
        raise argparse.ArgumentTypeError(f"{what} must be a number, got {str(text)[:40]!r}")
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"{what} must be a finite number, got {text!r}")
    return v


def timeout(text: str) -> float:
    """Seconds: finite and > 0 (at most a week)."""
    v = _float(text, "the timeout")
    if not 0 < v <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"the timeout must be > 0 and at most 604800 seconds "
                                         f"(a week), got {text!r}")
    return v


def tolerance(text: str) -> float:
    """A relative tie tolerance: finite, 0 <= t <= 1."""
    v = _float(text, "the tie tolerance")
    if not 0 <= v <= 1:
        raise argparse.ArgumentTypeError(f"the tie tolerance is a fraction between 0 and 1 "
                                         f"(0.05 = 5%), got {text!r}")
    return v


def parse_bytes(text: str) -> int:
    """``123456``, ``512MiB``, ``1.5GB`` -> int bytes, at most 1 PiB."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"capacity {text!r} is not a size: use bytes (123456) or a unit "
            f"({', '.join(u for u in ('KiB', 'MiB', 'GiB', 'TiB', 'KB', 'MB', 'GB'))})")
    try:
        value = int(Decimal(m.group(1)) * _UNITS[unit])
    except (InvalidOperation, OverflowError, ValueError):
        raise argparse.ArgumentTypeError(f"capacity {text!r} is not a size") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"capacity must be positive, got {text!r}")
    if value > MAX_CAPACITY:
        raise argparse.ArgumentTypeError(f"capacity {text!r} is {value:,} bytes, above the limit of "
                                         f"1 PiB ({MAX_CAPACITY:,} bytes) per device")
    return value


def allow_model(dataset, model):
    """``dataset`` (a Profile or Sweep) with its model spec trusted when the person typed
    that same model as ``--model`` (a ``TrustedSpec``); unchanged when ``model`` is None.

    A file that names a user model is data: its code runs only when the spec is typed on
    the command line too (issue 12). A different model is refused, naming both."""
    import dataclasses

    from mcap.core.errors import McapError
    from mcap.models.spec import normalise_spec

    if model is None:
        return dataset
    spec = dataset.model.spec
    try:
        same = normalise_spec(model) == normalise_spec(spec)
    except McapError:
        same = False
    if not same:
        raise McapError(f"--model {model!r} is not the file's model {spec!r}; --model only "
                        f"confirms the model the file names")
    return dataclasses.replace(dataset, model=dataclasses.replace(dataset.model, spec=model))


def add_confirm_model_option(p, command: str) -> None:
    """``--model SPEC``: the person confirms the file's user model, so its code may run for
    the ``time`` method (issue 12: mcap never runs code because a file names it)."""
    from mcap.models.spec import trusted_model_arg
    p.add_argument("--model", type=trusted_model_arg, default=None, metavar="SPEC",
                   help=f"for the time method of {command} on a user model "
                        "(package.module:function): type the file's spec here to allow running "
                        "that code; mcap never runs code because a file names it")
