"""Seeded mutations of the bundled JSON files, and the readers they are fed to (issue 12).

Used by tests/test_hardening_fuzz.py (a fast subset) and bench/bench_fuzz.py (>= 500 per
reader). A reader passes an input when it returns exit code 0 or 2 (or, for the loader,
a value or an McapError); anything else (an uncaught exception, another code) is a finding.
"""
from __future__ import annotations

import contextlib
import io
import json
import random
from pathlib import Path
from typing import Callable, Optional

DATA = Path(__file__).resolve().parent.parent / "data"
PROFILE = DATA / "vgg11-cpu4.profile.json"
SWEEP = DATA / "vgg11-cpu4-seed1-sample150.sweep.json"

_VALUES = [None, True, False, 0, -1, 1, -(2**63), 2**63, 10**30, -(10**30), 1e308, -1e308,
           float("nan"), float("inf"), float("-inf"), 0.5, -0.5, "", "x", "12", "1e400", [],
           {}, [1, 2], {"a": 1}, "mcap_hostile_xyz:make", "os:system:command=true", "\u00b2",
           "\x00", "a" * 10000]


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:6]) if len(obj) > 6 else enumerate(obj):
            yield from _paths(v, prefix + (i,))


def _set(obj, path, value):
    if not path:
        return value
    target = obj
    for k in path[:-1]:
        target = target[k]
    target[path[-1]] = value
    return obj


def _get(obj, path):
    for k in path:
        obj = obj[k]
    return obj


def mutate(text: str, rng: random.Random) -> bytes:
    """One mutated document: a field's type, sign or size changed, a key deleted, deep
    nesting, a truncation, raw byte noise, or another encoding."""
    kind = rng.choice(("value", "value", "value", "sign", "delete", "nest", "truncate",
                       "bytes", "encoding", "grow", "swap"))
    if kind == "truncate":
        return text[: rng.randrange(len(text))].encode()
    if kind == "bytes":
        data = bytearray(text.encode())
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == "encoding":
        return text.encode(rng.choice(("utf-16", "utf-16-le", "utf-32", "latin-1")), "replace")
    doc = json.loads(text)
    paths = list(_paths(doc))
    path = rng.choice(paths)
    if kind == "value":
        doc = _set(doc, path, rng.choice(_VALUES))
    elif kind == "sign":
        v = _get(doc, path)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            doc = _set(doc, path, -v if v else -1)
        else:
            doc = _set(doc, path, -rng.randint(1, 10**12))
    elif kind == "delete" and path:
        parent = _get(doc, path[:-1])
        del parent[path[-1]]
    elif kind == "nest":
        v = _get(doc, path)
        for _ in range(rng.choice((2, 50, 5000))):
            v = [v]
        doc = _set(doc, path, v)
    elif kind == "grow":
        v = _get(doc, path)
        if isinstance(v, list) and v:
            doc = _set(doc, path, v * rng.choice((2, 50)))
        else:
            doc = _set(doc, path, rng.choice((10**rng.randint(10, 5000), "9" * 100)))
    elif kind == "swap":
        doc = _set(doc, path, rng.choice(([doc] if not path else []) + [[], "[]", 3]))
    try:
        return json.dumps(doc).encode()
    except (ValueError, RecursionError):
        return text.encode()


def _cli(argv) -> tuple[Optional[int], str]:
    from mcap.cli.main import main
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([str(a) for a in argv])
    except BaseException as exc:  # noqa: BLE001  (the finding itself)
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"
    text = err.getvalue()
    if "Traceback" in text:
        return None, text[-300:]
    return code, text


def _loader(path: Path, _other: Path) -> tuple[Optional[int], str]:
    from mcap.core.errors import McapError
    from mcap.io.jsonio import load_any
    try:
        load_any(path)
        return 0, ""
    except McapError as exc:
        return 2, str(exc)
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


def _upload(path: Path, _other: Path):
    from mcap.core.errors import McapError
    from mcap.io.datasets import load_upload
    try:
        load_upload("fuzz.json", path.read_bytes())
        return 0, ""
    except McapError as exc:
        return 2, str(exc)
    except BaseException as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


# reader name -> (which bundled file is mutated, how it is read)
READERS: dict[str, tuple[Path, Callable]] = {
    "loader(profile)": (PROFILE, _loader),
    "loader(sweep)": (SWEEP, _loader),
    "upload": (PROFILE, _upload),
    "predict": (PROFILE, lambda p, o: _cli(["predict", "--profile", p, "--balance", "3,3,5,19"])),
    "recommend": (PROFILE, lambda p, o: _cli(["recommend", "--profile", p, "--stages", "4"])),
    "recommend-time": (PROFILE, lambda p, o: _cli(["recommend", "--profile", p, "--stages", "4",
                                                   "--method", "time"])),
    "evaluate(profile)": (PROFILE, lambda p, o: _cli(["evaluate", "--profile", p, "--sweep", SWEEP,
                                                      "--no-time", "--bo-iterations", "10"])),
    "evaluate(sweep)": (SWEEP, lambda p, o: _cli(["evaluate", "--profile", PROFILE, "--sweep", p,
                                                  "--no-time", "--bo-iterations", "10"])),
}


def run(reader: str, count: int, seed: int, folder: Path) -> tuple[dict, list[str]]:
    """Feed ``count`` mutated inputs to one reader: a tally of exit codes and the findings."""
    source, read = READERS[reader]
    text = source.read_text()
    rng = random.Random(f"{reader}:{seed}")
    tally: dict = {}
    findings: list[str] = []
    for i in range(count):
        data = mutate(text, rng)
        path = folder / f"fuzz-{i}.json"
        path.write_bytes(data)
        code, why = read(path, source)
        tally[code] = tally.get(code, 0) + 1
        if code not in (0, 2):
            findings.append(f"{reader} input {i} (seed {seed}): code {code}: {why}")
            (folder / f"finding-{reader}-{i}.json").write_bytes(data)
        path.unlink()
    return tally, findings
