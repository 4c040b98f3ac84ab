"""What several test files share (ARCHITECTURE.md, "Tests"): the repository's paths, a
store of the test's own, and the oracles and random-case builders that more than one test
file checks mcap against, each in one copy.

The tree of tests/ mirrors mcap/: the test of ``mcap/X/Y.py`` is ``tests/X/test_Y.py``.
Helpers are plain functions and constants, imported by name (``from tests.conftest import
DATA``); the fixtures (``tmp_store``) pytest finds by itself. Nothing here imports torch,
and mcap is imported inside the helpers, so collecting a pure test stays fast."""
from __future__ import annotations

import contextlib
import functools
import itertools
import random
import signal
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"  # the bundled profiles, sweeps and scale files
FIXTURES = REPO / "tests" / "fixtures"  # files only the tests read
APP = str(REPO / "app.py")  # the dashboard, for AppTest.from_file
MiB = 2**20


# --- isolation ---------------------------------------------------------------------------

@pytest.fixture
def tmp_store(tmp_path, monkeypatch):
    """The path of an empty results store in tmp_path, the one every command and page opens
    (``MCAP_STORE``): a test never reads or writes the user's store."""
    path = tmp_path / "store.sqlite"
    monkeypatch.setenv("MCAP_STORE", str(path))
    return path


@pytest.fixture(autouse=True, scope="session")
def _own_machine_cache(tmp_path_factory):
    """For every process the tests start: the machine cache (``MCAP_CACHE_DIR``: measured
    links and co-run factors) in a folder of the test session's own, so a test never reads
    or writes the user's ``~/.cache/mcap``; and no co-run measurement (``MCAP_CORUN=off``:
    it takes 4-7 s per model and setup, and the suite opens dozens; the replay then shares
    the cores fairly as before). tests/runner/test_corun.py measures it for real."""
    import os
    saved = {k: os.environ.get(k) for k in ("MCAP_CACHE_DIR", "MCAP_CORUN")}
    os.environ["MCAP_CACHE_DIR"] = str(tmp_path_factory.mktemp("mcap-cache"))
    os.environ["MCAP_CORUN"] = "off"
    yield
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


# --- order: the long tests first ---------------------------------------------------------

# The longest single test (minutes: every command of README.md and docs/), started first.
LONGEST = "tests/test_readme_commands.py::test_every_readme_command_runs"


def pytest_collection_modifyitems(config, items):
    """Run the long tests first and the short ones last: the README test, then the
    ``integration`` tests, then the rest, each part in its collected order. pytest-xdist
    (``--dist loadgroup``) hands tests out in this order as workers free up, so the run
    ends on fast tests in both workers instead of one worker alone on a minutes-long test
    the collection order put near the end. Tests run in any order (ARCHITECTURE.md, "Tests")."""
    def rank(item) -> int:
        if item.nodeid == LONGEST:
            return 0
        return 1 if item.get_closest_marker("integration") else 2
    items[:] = sorted(items, key=rank)  # stable: the collected order within each part
    if getattr(config.option, "loadgroup", False):
        _xdist_groups(items)


def _xdist_groups(items) -> None:
    """``xdist_group`` as pytest-xdist means it under pytest 9. xdist 3.8 groups a test by
    the ``@group`` it appends to ``item._nodeid``; pytest 9 keeps the id in ``item._id``,
    so the suffix was dropped and every grouped test went to any worker: the Ray and Slurm
    clusters and the module fixtures of a grouped file started once in each worker. Here
    the suffix goes where pytest 9 reads it (a no-op where xdist's own one took)."""
    try:
        from _pytest.nodeid import NodeId
    except ImportError:  # pytest < 9: xdist's suffix works
        return
    for item in items:
        names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                        for m in item.iter_markers("xdist_group")})
        if names and "@" not in item.nodeid and isinstance(getattr(item, "_id", None), NodeId):
            item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")


# --- partitioning: exhaustive search -----------------------------------------------------

def all_balances(L: int, G: int) -> list[tuple[int, ...]]:
    """Every partitioning of L layers into G non-empty stages, as tuples."""
    import numpy as np
    from mcap.core import partition
    return [tuple(int(x) for x in b) for b in np.concatenate(list(partition.enumerate_all(L, G)))]


def exhaustive(stats, G: int, tol: float = 0.0):
    """(best balance, optimal peak) by exhaustive search: the lowest sorted peaks within the
    tie band ``tol`` of the optimum, mcap's tie-break among them (the oracle every search
    method is checked against)."""
    from mcap.core.predict import predict
    from mcap.core.search.tiebreak import key, make_band
    allb = all_balances(stats.num_layers, G)
    preds = {b: predict(stats, b).peaks for b in allb}
    opt = min(max(p) for p in preds.values())
    band = make_band(opt, tol)
    return min(allb, key=lambda b: key(preds[b], b, band)), opt


# --- MPress: the brute-force oracle and random problems -----------------------------------

def press_plans(p):
    """Every plan of an MPress problem: each layer kept, recomputed, swapped to the host or
    moved to each other stage's device (d2d)."""
    from mcap.core.press.actions import LayerAction
    stage = p.stage_of()
    opts = [[LayerAction(l)] + [LayerAction(l, a) for a in ("recompute", "swap")]
            + [LayerAction(l, "d2d", t) for t in range(p.stages) if t != stage[l]]
            for l in range(len(p.saved))]
    return itertools.product(*opts)


def press_best(p, cap):
    """The least added time of any plan whose every device fits ``cap``, by brute force over
    ``press_plans``; None when no plan fits."""
    from mcap.core.press import outcome
    best = None
    for actions in press_plans(p):
        o = outcome(p, actions)
        if o.fits(cap) and (best is None or o.added_seconds < best):
            best = o.added_seconds
    return best


def press_floor(p) -> int:
    """The lowest fullest-device peak any plan reaches, by brute force (``smallest_capacity``
    must equal it)."""
    from mcap.core.press import outcome
    return min(max(outcome(p, actions).peaks) for actions in press_plans(p))


def press_case(seed, L=12, G=4):
    """A random problem and a capacity between the smallest reachable and keep-all's peak;
    bandwidths low enough that swaps often cost time (live intervals do not hide them)."""
    from mcap.core.press import problem_from, smallest_capacity
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, L), G - 1))
    bal = tuple(b - a for a, b in zip([0] + cuts, cuts + [L]))
    saved = [rng.randint(0, 40) * MiB for _ in range(L)]
    fwd = [rng.uniform(0.001, 0.02) for _ in range(L)]
    base = [rng.randint(300, 900) * MiB for _ in range(G)]
    p = problem_from("toy", bal, base, rng.choice(["1f1b", "gpipe"]), rng.choice([2, 4, 8]),
                     saved, fwd, rng.choice([2e7, 1e8, 1e9]), rng.choice([2e8, 1e9, 1e10]))
    lo, hi = smallest_capacity(p), max(base)
    return p, int(lo + rng.uniform(0, 1) * max(hi - lo, 0))


def press_case_working(seed):
    """A random 5-layer, 2-stage problem with working bytes, parameters, backward and forward
    transients and a recompute segment's bytes (``mcap.core.press.events``), and a capacity
    between the smallest reachable and keep-all's peak."""
    from mcap.core.press import problem_from, smallest_capacity
    rng = random.Random(seed)
    L = 5
    saved = [rng.choice([0, 1, 2, 4]) * MiB for _ in range(L)]
    work = [rng.choice([0, 1, 3, 6]) * MiB for _ in range(L)]
    params = [rng.choice([0, 2, 8]) * MiB for _ in range(L)]
    trans = [(p + w, rng.choice([1, 2]) * MiB + w, rng.choice([1, 2]) * MiB + w + s // 2)
             for p, w, s in zip(params, work, saved)]
    fwd = [(s + rng.choice([0, 1]) * MiB, rng.choice([0, 1]) * MiB) for s in saved]
    p = problem_from("toy", (3, 2), (400 * MiB, 300 * MiB), rng.choice(["gpipe", "1f1b"]), 2,
                     saved, [rng.uniform(0.001, 0.02) for _ in range(L)], 1e8, 2e8, work=work,
                     params=params, transients=trans, forward_peaks=fwd,
                     segment_bytes=rng.choice([0, MiB]))
    lo, hi = smallest_capacity(p), max(p.base)
    return p, int(lo + rng.uniform(0, 1) * (hi - lo))


def press_case_pins(seed):
    """A random 5-layer, 2-stage problem whose layers pass tensors other layers own
    (``PressStats.boundaries``) and share storages, and a capacity between the smallest
    reachable and keep-all's peak."""
    from mcap.core.press import problem_from, smallest_capacity
    rng = random.Random(seed)
    L = 5
    saved = [rng.randint(1, 30) * MiB for _ in range(L)]
    bounds = [()] + [tuple((o, rng.randint(1, saved[o] // MiB) * MiB if o >= 0 else MiB)
                           for o in {rng.choice([b - 1, min(b, L - 1), -1])})
                     for b in range(1, L + 1)]
    shared = [(o, o + rng.randint(1, 2), MiB) for o in range(L - 2) if rng.random() < 0.4]
    p = problem_from("toy", (3, 2), (400 * MiB, 300 * MiB), "gpipe", 2, saved,
                     [rng.uniform(0.001, 0.02) for _ in range(L)], 1e8, 2e8, boundaries=bounds,
                     shared=shared)
    lo, hi = smallest_capacity(p), max(p.base)
    return p, int(lo + rng.uniform(0, 1) * (hi - lo))


# --- MPress: the bundled VGG11 profile with press statistics -----------------------------

PRESS_DATA = "data/vgg11-h512-b8-cpu4.profile.json"  # relative: the CLI tests pass it as typed
PRESS_BAL = "13,3,1,13"


def press_profile(checkpoint="never"):
    """The bundled VGG11 profile with constructed MPress statistics (saved bytes a share of
    each layer's measured memory; profiling measures them for real)."""
    import dataclasses
    from mcap.core.types import PressStats
    from mcap.io import jsonio
    p = jsonio.load_profile(REPO / PRESS_DATA)
    saved = tuple(int(0.4 * max(a if a is not None else i, 0)) // p.setup.chunks
                  for a, i in zip(p.stats.mem_added, p.stats.mem_isolated))
    fwd = tuple(0.002 + 0.0005 * (l % 5) for l in range(p.model.num_layers))
    return dataclasses.replace(p, setup=dataclasses.replace(p.setup, checkpoint=checkpoint),
                               press=PressStats(saved, fwd, 2e9, 8e9))


@functools.lru_cache(maxsize=None)
def press_capacities():
    """(CAP, JOINT_CAP, TOP) of ``press_profile``: a capacity halfway between what any plan of
    PRESS_BAL reaches and its keep-all peak, one halfway between the lowest floor over every
    partitioning and the lowest keep-all peak, and PRESS_BAL's keep-all peak (computed, so a
    predictor change keeps them meaningful)."""
    from mcap.core.partition import parse_balance
    from mcap.core.press import problem, smallest_capacity
    from mcap.core.press.jointsearch import floor_of
    p = press_profile()
    prob = problem(p, parse_balance(PRESS_BAL))
    peak, floor = floor_of(p, 4)
    return ((smallest_capacity(prob) + max(prob.base)) // 2, (floor + peak) // 2, max(prob.base))


# --- the CLI as a hostile user meets it (tests/cli, tests/store) -------------------------


@contextlib.contextmanager
def no_hang(seconds: int = 20):
    """Fail instead of blocking forever (opening a FIFO for reading waits for a writer)."""
    def alarm(signum, frame):
        raise AssertionError(f"blocked for {seconds} s (a FIFO opened for reading?)")
    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def cli(capsys, *argv):
    """``python -m mcap ARGV`` in this process: (exit code, stdout, stderr), with no
    traceback and no exception name before mcap's own "mcap: error:" line."""
    from mcap.cli.main import main
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "Error:" not in err.split("mcap: error:")[0], err
    return code, out, err


def warm_orders(pairs=((4, 4), (4, 8), (4, 2), (2, 2), (2, 8), (8, 2))) -> None:
    """Give ``mcap.io.orders`` torch's action lists for the (G, M) the page tests open, made
    in this process (``mcap.runner.orders.generate``), so an AppTest's first run of the
    teaching page starts no child process within its timeout (the child itself is tested in
    tests/io/test_orders.py)."""
    from mcap.core import schedules
    from mcap.core.errors import McapError
    from mcap.io import orders
    from mcap.runner.orders import generate
    for G, M in pairs:
        for name in schedules.names():
            v = schedules.get(name).virtual(None)
            for req in ((name, G, v, M), (name, G, 1, M), ("gpipe", G * v, 1, M)):
                try:
                    orders.keep(generate(*req))
                except McapError:
                    continue  # the page answers it without a child
