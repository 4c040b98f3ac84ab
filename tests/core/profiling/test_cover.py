"""Stage keys, the covering set and composition (mcap.core.profiling.cover); pure, no processes."""
from __future__ import annotations

import random
import sqlite3
import time

import pytest

from mcap.core.profiling import cover
from mcap.core.profiling.cover import Knowledge, compose_all, greedy_cover, stage_keys
from mcap.core.errors import McapError, SchemaError
from mcap.core.partition import enumerate_all, random_partitionings
from mcap.core.types import Layer, MemoryBreakdown, ModelInfo, Run, Setup, Sweep
from mcap.io import jsonio
from mcap.store import Store
from mcap.store import opening


def every(layers, stages):
    return [tuple(int(n) for n in row) for chunk in enumerate_all(layers, stages) for row in chunk]


def fake_peak(key) -> int:
    """A made-up peak that differs for every key, so a wrong key composes a wrong peak."""
    first, last, where = key
    return 1_000_000 * (first + 1) + 1_000 * (last + 1) + hash(str(where)) % 997


def fake_run(balance, schedule, status="ok"):
    keys = stage_keys(balance, schedule)
    if status != "ok":
        return Run(tuple(balance), status, None, 1.0, error="boom")
    return Run(tuple(balance), "ok", tuple(fake_peak(k) for k in keys), 1.0, samples_per_second=3.0,
               breakdown=tuple(MemoryBreakdown(1, 2, 3, fake_peak(k) - 6) for k in keys))


# --- stage keys ----------------------------------------------------------------------

def test_gpipe_key_is_layers_and_position_1f1b_key_is_layers_and_index():
    assert stage_keys((2, 3, 1, 4), "gpipe") == (
        (0, 1, "first"), (2, 4, "middle"), (5, 5, "middle"), (6, 9, "last"))
    assert stage_keys((2, 3, 1, 4), "1f1b") == ((0, 1, 0), (2, 4, 1), (5, 5, 2), (6, 9, 3))
    # Under GPipe a middle stage is the same stage at index 1 or 2; under 1F1B it is not
    # (stage i holds min(G-i, M) micro-batches).
    assert stage_keys((2, 2, 3, 3), "gpipe")[1] == stage_keys((1, 1, 2, 6), "gpipe")[2]
    assert stage_keys((2, 2, 3, 3), "1f1b")[1] != stage_keys((1, 1, 2, 6), "1f1b")[2]
    # The only stage both takes the batch and computes the loss.
    assert stage_keys((7,), "gpipe") == ((0, 6, "only"),)
    assert stage_keys((7,), "1f1b") == ((0, 6, 0),)
    # First and last stages with the same layers as a middle one are other keys.
    assert len({stage_keys(b, "gpipe")[0] for b in [(3, 1, 1, 1), (3, 2, 1, 1)]}) == 1
    assert stage_keys((3, 1, 1), "gpipe")[0] != stage_keys((1, 3, 1), "gpipe")[1]


def test_stage_keys_refuse_bad_input():
    with pytest.raises(McapError, match="schedule 'interleaved'"):
        stage_keys((1, 2), "interleaved")
    with pytest.raises(McapError, match=r"balance \[2, 0\]"):
        stage_keys((2, 0), "gpipe")


# --- the cover -----------------------------------------------------------------------

def assert_cover(picked, balances, schedule, known=()):
    assert set(picked) <= set(balances), "the cover picks only requested partitionings"
    assert len(set(picked)) == len(picked)
    wanted = cover.distinct_keys(balances, schedule) - set(known)
    held = cover.distinct_keys(picked, schedule)
    assert wanted <= held, f"keys not covered: {sorted(wanted - held)[:5]}"


@pytest.mark.parametrize("schedule,bound", [("gpipe", 234), ("1f1b", 560)])
def test_cover_of_vgg11_space_is_a_small_cover_and_fast(schedule, bound):
    balances = every(30, 4)  # VGG11's 30 layers on 4 stages: 3,654 partitionings
    started = time.process_time()  # this process's CPU seconds: not the machine's load
    picked = greedy_cover(balances, schedule)
    seconds = time.process_time() - started
    assert_cover(picked, balances, schedule)
    # GPipe: 459 keys, 405 of them middle ones and a pick holds two, so >= 203; issue 13
    # counted at most 235. 1F1B: a boundary after layer b (1..27) is in max(b, 28-b)
    # picks at least, 560 in all: the greedy cover is optimal there.
    assert len(picked) <= bound
    assert len(picked) >= (203 if schedule == "gpipe" else 560)
    assert seconds < 2.0


@pytest.mark.parametrize("seed", range(5))
def test_cover_of_random_samples_and_with_known_keys(seed):
    rng = random.Random(seed)
    layers, stages = rng.randint(6, 20), rng.randint(2, 5)
    schedule = rng.choice(["gpipe", "1f1b"])
    balances = random_partitionings(layers, stages, rng.randint(1, 60), seed=seed)
    picked = greedy_cover(balances, schedule)
    assert_cover(picked, balances, schedule)
    assert len(picked) <= len(balances)
    known = set(rng.sample(sorted(cover.distinct_keys(balances, schedule), key=str), 3))
    assert_cover(greedy_cover(balances, schedule, known=known), balances, schedule, known)
    assert greedy_cover(balances, schedule, known=cover.distinct_keys(balances, schedule)) == []
    assert greedy_cover([], schedule) == []


def test_cover_is_deterministic():
    balances = random_partitionings(20, 4, 300, seed=1)
    assert greedy_cover(balances, "gpipe") == greedy_cover(list(balances), "gpipe")


# --- composition ---------------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_composed_runs_equal_the_runs_they_stand_for(schedule):
    balances = every(9, 4)
    picked = greedy_cover(balances, schedule)
    composed = compose_all([fake_run(b, schedule) for b in picked], balances, schedule, 4)
    for b, run in zip(balances, composed):
        truth = fake_run(b, schedule)
        assert run is not None
        assert (run.status, run.peaks, run.breakdown) == (truth.status, truth.peaks, truth.breakdown)
        assert run.composed and run.seconds == 0.0 and run.samples_per_second is None
    # With one covering run missing, the partitionings needing its keys are not composed.
    short = compose_all([fake_run(b, schedule) for b in picked[1:]], balances, schedule, 4)
    assert short[balances.index(picked[0])] is None


def test_oom_run_proves_a_stage_oom_only_when_its_other_stages_fit_elsewhere():
    k = Knowledge("gpipe", 4)
    # (0,1,first) (2,4,middle) (5,5,middle) (6,6,last): which one ran out is not known yet.
    k.add(fake_run((2, 3, 1, 1), "gpipe", status="oom"))
    assert k.oom == {} and k.compose((2, 3, 1, 1)) is None
    k.add(fake_run((2, 2, 1, 2), "gpipe"))  # (0,1,first) fits
    assert k.oom == {}  # (2,4), (5,5) and (6,6) still open
    k.add(fake_run((3, 2, 1, 1), "gpipe"))  # (5,5,middle) and (6,6,last) fit
    assert k.oom == {(2, 4, "middle"): (2, 3, 1, 1)}  # so (2,4,middle) ran out
    oom = k.compose((2, 3, 1, 1))
    assert oom.status == "oom" and oom.composed and oom.peaks is None
    # Every partitioning holding that stage is oom, here at another index and with
    # other stages that were never measured.
    other = k.compose((1, 1, 3, 2))
    assert other.status == "oom" and other.composed
    assert "stage 2 (layers 2..4) ran out of memory in run [2, 3, 1, 1]" in other.error
    assert k.compose((1, 1, 1, 4)) is None  # unknown stages, none known oom
    assert k.compose((2, 2, 1, 2)).status == "ok"


def test_failed_runs_prove_nothing_and_stage_counts_must_match():
    k = Knowledge("gpipe", 2)
    k.add(fake_run((1, 3), "gpipe"))
    k.add(fake_run((3, 1), "gpipe", status="failed"))
    assert k.compose((3, 1)) is None and k.oom == {}
    with pytest.raises(McapError, match="compare only within one setup of 2 stages"):
        k.add(fake_run((1, 1, 2), "gpipe"))
    with pytest.raises(McapError, match="has 3 stages; this setup has 2"):
        k.compose((1, 1, 2))


def test_a_key_whose_peak_varies_keeps_the_highest():
    k = Knowledge("gpipe", 2)
    k.add(Run((1, 3), "ok", (10, 20), 1.0))
    k.add(Run((1, 3), "ok", (11, 19), 1.0))
    assert k.compose((1, 3)).peaks == (11, 20)
    assert k.compose((1, 3)).breakdown is None  # not recorded: not composed


# --- the composed flag in files and the store ----------------------------------------

MODEL = ModelInfo("toy", tuple(Layer(f"l{i}", 4) for i in range(4)))
SETUP = Setup(stages=2, batch_size=4, chunks=2)


def test_composed_flag_round_trips_json_and_old_files_load(tmp_path):
    runs = (fake_run((1, 3), "gpipe"), Run((2, 2), "ok", (5, 6), 0.0, composed=True),
            Run((3, 1), "oom", None, 0.0, error="stage 0 ran out", composed=True))
    sw = Sweep(MODEL, SETUP, runs)
    d = jsonio.to_dict(sw)
    assert "composed" not in d["runs"][0] and d["runs"][1]["composed"] is True
    jsonio.save(sw, tmp_path / "s.json")
    assert jsonio.load_sweep(tmp_path / "s.json") == sw
    d["runs"][1]["composed"] = "yes"
    with pytest.raises(SchemaError, match=r"runs\[1\]\.composed.*expected true or false"):
        jsonio.sweep_from_dict(d)
    del d["runs"][1]["composed"]  # a file from before the field: a measured run
    assert jsonio.sweep_from_dict(d).runs[1].composed is False


def test_store_keeps_composed_flag_and_find_run_skips_composed(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    study = store.study(MODEL, SETUP)
    store.record_run(study, Run((2, 2), "ok", (5, 6), 0.0, composed=True), kind="sweep")
    assert store.find_run(study, (2, 2)) is None  # never reused as a measurement
    assert store.runs(study)[0].composed is True
    measured = Run((2, 2), "ok", (5, 6), 0.5)
    store.record_run(study, measured, kind="sweep")
    assert store.find_run(study, (2, 2)) == measured
    sid = store.save_sweep(Sweep(MODEL, SETUP, (Run((2, 2), "ok", (5, 6), 0.0, composed=True),)))
    assert store.load_sweep(sid).runs[0].composed is True
    assert len(store.runs(study)) == 2  # the identical composed run was linked, not copied
    store.close()


def test_a_version_2_store_gains_the_later_columns_in_place(tmp_path):
    """A store written by schema 2 (no runs.composed; nor what schema 4 added: runs.times,
    runs.estimated, stage_runs) is upgraded in place to a new store's tables."""
    import re

    new, path = tmp_path / "new.sqlite", tmp_path / "old.sqlite"
    Store(new).close()
    # What schema 2 wrote: today's tables without the later columns and table.
    v2 = re.sub(r"\n-- One stage run alone.*?CREATE INDEX stage_runs_study[^;]*;", "",
                opening._SCHEMA, flags=re.S)
    v2 = re.sub(r",?\n    (composed|times|estimated) [^\n]*", "", v2)
    v2 = v2.replace("machines(key), -- Machine", "machines(key) -- Machine")
    v2 = v2.replace(f"user_version = {opening.SCHEMA_VERSION}", "user_version = 2")
    assert not re.search(r"composed|stage_runs|estimated", v2)
    conn = sqlite3.connect(path)
    for statement in v2.split(";"):
        if statement.strip():
            conn.execute(statement)
    conn.commit()
    conn.close()
    store = Store(path)
    study = store.study(MODEL, SETUP)
    store.record_run(study, Run((1, 3), "ok", (1, 2), 0.1), kind="measure")
    assert store.runs(study)[0].composed is False
    store.close()

    def tables(p):
        c = sqlite3.connect(p)
        out = {name: [row[1:] for row in c.execute(f"PRAGMA table_info({name})")]
               for (name,) in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        version = c.execute("PRAGMA user_version").fetchone()[0]
        c.close()
        return out, version

    assert tables(path) == tables(new)
    assert tables(path)[1] == opening.SCHEMA_VERSION == 4
