"""Schedules' action lists for a process that must not import torch (the dashboard server).

Only torch knows the order in which a schedule runs its forwards and backwards
(``mcap.runner.orders`` reads it off torch's own classes; DESIGN.md, "Every schedule is one
action list"). A page asks here; this module runs ``python -m mcap.runner.orders`` in a
child process, several lists per call (torch is imported once for all of them), and keeps
every answer for the life of the process: a list depends only on (schedule, G, V, M) and the
torch the child imports.

The child's JSON is data: each list goes through ``mcap.core.schedules.actions.from_dict``,
which checks it, and must be the list that was asked for. A request the registry refuses
(``Schedule.check``: torch's own rules) is answered without a child; whatever else fails
is a :class:`McapError` naming the request and the child's words.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterable, Sequence, Union

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.schedules.actions import ActionList, from_dict

REPO_ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 180.0        # a child imports torch (seconds on a busy machine), then is quick
MAX_OUTPUT = 64 * 2**20  # bytes of JSON read back from one child
MAX_KEPT = 1024          # answers kept; the oldest go first

Request = tuple  # (schedule, G, V, M)
Answer = Union[ActionList, McapError]

_KEPT: dict[Request, Answer] = {}
_LOCK = threading.Lock()


def _key(schedule: str, stages: int, virtual: int, chunks: int) -> Request:
    return (str(schedule), int(stages), int(virtual), int(chunks))


def _name(req: Request) -> str:
    return f"{req[0]} with G={req[1]}, V={req[2]}, M={req[3]}"


def _refused(req: Request):
    """The registry's refusal of a request (torch's rules, checked without torch), or None."""
    try:
        spec = schedules.get(req[0])
        spec.check(req[1], spec.virtual(req[2]), req[3])
        if req[1] < 1:
            raise McapError(f"a pipeline needs at least 1 rank, got G={req[1]}")
    except McapError as exc:
        return McapError(f"schedule {_name(req)}: {exc}")
    return None


def _run_child(reqs: Sequence[Request], timeout: float) -> list[ActionList]:
    """One child for ``reqs``: the lists in the order asked, or McapError."""
    argv = [sys.executable, "-m", "mcap.runner.orders"]
    last = None
    for name, g, v, m in reqs:
        if name != last:
            argv.append(name)
            last = name
        argv += [str(g), str(v), str(m)]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO_ROOT) + (os.pathsep + env["PYTHONPATH"]
                                          if env.get("PYTHONPATH") else "")
    what = ", ".join(_name(r) for r in reqs[:3]) + (" ..." if len(reqs) > 3 else "")
    try:
        done = subprocess.run(argv, cwd=str(REPO_ROOT), env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise McapError(f"torch took over {timeout:.0f} s to give the action list of {what}") \
            from None
    except OSError as exc:
        raise McapError(f"could not start python -m mcap.runner.orders for {what}: {exc}") \
            from None
    if done.returncode != 0:
        words = done.stderr.decode("utf-8", "replace").strip().splitlines()
        said = words[-1] if words else f"exit status {done.returncode}"
        raise McapError(f"the action list of {what}: {said.removeprefix('error: ')}")
    if len(done.stdout) > MAX_OUTPUT:
        raise McapError(f"the action list of {what} is over {MAX_OUTPUT // 2**20} MiB of JSON")
    try:
        data = json.loads(done.stdout)
    except ValueError as exc:
        raise McapError(f"the action list of {what} is not JSON: {exc}") from None
    if not isinstance(data, list) or len(data) != len(reqs):
        raise McapError(f"asked for {len(reqs)} action lists ({what}), got "
                        f"{len(data) if isinstance(data, list) else type(data).__name__}")
    out = []
    for req, item in zip(reqs, data):
        al = from_dict(item)
        if (al.schedule, al.stages, al.virtual, al.chunks) != req:
            raise McapError(f"asked for the action list of {_name(req)}, got "
                            f"{_name((al.schedule, al.stages, al.virtual, al.chunks))}")
        out.append(al)
    return out


def answers(requests: Iterable[Request], timeout: float = TIMEOUT_S) -> dict[Request, Answer]:
    """Every request's ActionList, or the McapError saying why there is none; one child for
    all that are not known yet. Requests are (schedule, G, V, M); V as the schedule takes it
    (``Schedule.virtual``: 1 for single-stage schedules, 2 for the V-shaped ones)."""
    wanted = list(dict.fromkeys(_key(*r) for r in requests))
    with _LOCK:
        known = {r: _KEPT[r] for r in wanted if r in _KEPT}
    new: dict[Request, Answer] = {}
    ask = []
    for r in wanted:
        if r in known:
            continue
        refused = _refused(r)
        if refused is None:
            ask.append(r)
        else:
            new[r] = refused
    if ask:
        ask.sort(key=lambda r: r[0])  # one schedule word per group of numbers
        try:
            new.update(zip(ask, _run_child(ask, timeout)))
        except McapError as exc:
            if len(ask) == 1:
                new[ask[0]] = exc
            else:  # one request spoilt the batch: ask again one by one, to say which
                for r in ask:
                    try:
                        new[r] = _run_child([r], timeout)[0]
                    except McapError as one:
                        new[r] = one
    with _LOCK:
        for r, a in new.items():
            if "took over" in str(a) or "could not start" in str(a):
                continue  # the machine's state, not the request's answer: ask again next time
            _KEPT[r] = a
        while len(_KEPT) > MAX_KEPT:
            _KEPT.pop(next(iter(_KEPT)))
    return {r: known.get(r, new.get(r)) for r in wanted}


def action_lists(requests: Iterable[Request], timeout: float = TIMEOUT_S) -> tuple[ActionList, ...]:
    """The ActionLists of ``requests``, in order; McapError for the first that has none."""
    wanted = [_key(*r) for r in requests]
    got = answers(wanted, timeout)
    out = []
    for r in wanted:
        if isinstance(got[r], McapError):
            raise got[r]
        out.append(got[r])
    return tuple(out)


def action_list(schedule: str, stages: int, virtual: int, chunks: int,
                timeout: float = TIMEOUT_S) -> ActionList:
    """One schedule's ActionList for G ranks, V stages per rank and M micro-batches."""
    return action_lists([(schedule, stages, virtual, chunks)], timeout)[0]


def keep(al: ActionList) -> None:
    """Keep ``al`` as the answer to its request (a caller that already has torch's list, such
    as a test warming the dashboard's answers)."""
    with _LOCK:
        _KEPT[(al.schedule, al.stages, al.virtual, al.chunks)] = al


def forget() -> None:
    """Drop every kept answer (tests)."""
    with _LOCK:
        _KEPT.clear()
