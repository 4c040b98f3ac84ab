"""Fuzzing (issue 12): seeded mutations of the bundled JSON files fed to the loader, an
upload and every CLI command that reads a file; each must end in exit 0 or 2, never a
traceback. Store rows (issue 28): every column of every table changed once, then every
reader of the store. A fast subset here; bench/bench_fuzz.py runs >= 500 of each."""
from __future__ import annotations

import pytest

from tests.io import fuzzing

COUNTS = {"loader(profile)": 60, "loader(sweep)": 40, "upload": 20, "predict": 40,
          "recommend": 40, "recommend-time": 5, "evaluate(profile)": 6, "evaluate(sweep)": 6}


@pytest.mark.parametrize("reader", list(COUNTS))
def test_mutated_inputs_exit_0_or_2(tmp_path, monkeypatch, reader):
    monkeypatch.chdir(tmp_path)  # a spec naming a module must never find one anyway
    tally, findings = fuzzing.run(reader, COUNTS[reader], seed=12, folder=tmp_path)
    assert not findings, "\n".join(findings[:5])
    assert sum(tally.values()) == COUNTS[reader] and tally.get(2, 0) > 0  # the mutations bite


@pytest.mark.integration  # every column x 14 readers: 20-40 s, the longest test without processes
def test_every_column_of_every_table_mutated_reads_as_exit_0_or_2(tmp_path):
    base = fuzzing.base_store(tmp_path / "columns.sqlite")
    columns = fuzzing.store_columns(base)
    assert {t for t, _ in columns} == set(fuzzing.STORE_TABLES) and len(columns) >= 70
    tally, findings, per_table = fuzzing.run_store(len(columns), seed=28, folder=tmp_path)
    assert not findings, "\n".join(findings[:5])
    assert set(per_table) == set(fuzzing.STORE_TABLES)  # every table, every column once
    assert sum(per_table.values()) == len(columns) and tally.get(2, 0) > 0  # the edits bite
