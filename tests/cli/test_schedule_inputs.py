"""Bad schedule input exits 2 naming the rule, before any process starts (issue 39, Bad
input): a micro-batch count the schedule's rule breaks, V larger than the layers allow, V
given to a one-chunk schedule or not 2 to a V-shaped one, an unknown name (listing the
known ones)."""
from __future__ import annotations

import time

import pytest

from tests.conftest import cli

TINY = "gpt:layers=4,hidden=16,heads=2,vocab=32,seq=4"


@pytest.mark.parametrize("argv,needle", [
    (["--schedule", "dualpipev", "--stages", "2", "--chunks", "2"],
     "dualpipev needs at least as many micro-batches as pipeline stages (ranks x 2): chunks 2 < 4"),
    (["--schedule", "1f1b", "--stages", "4", "--chunks", "2"],
     "1f1b needs at least as many micro-batches as stages: chunks 2 < stages 4"),
    (["--schedule", "interleaved-1f1b", "--stages", "2", "--chunks", "6", "--batch-size", "12",
      "--virtual-stages", "2"], None),  # 6 % max(1, 6 // 2) == 0: allowed (checked below)
    (["--schedule", "interleaved-zb", "--stages", "2", "--chunks", "7", "--batch-size", "14",
      "--virtual-stages", "1"], "multiple of the rounds max(1, chunks // stages) = 3: chunks 7"),
    (["--schedule", "interleaved-1f1b", "--stages", "2", "--virtual-stages", "4"],
     "2 ranks x 4 stages per rank needs 8 chunks of at least one layer, but the model has 6"),
    (["--schedule", "1f1b", "--stages", "2", "--virtual-stages", "2"],
     "1f1b runs one stage per rank; --virtual-stages 2 applies only to"),
    (["--schedule", "zbv", "--stages", "2", "--virtual-stages", "3"],
     "zbv places two stages per rank in a V; --virtual-stages must be 2"),
    (["--schedule", "pipedream", "--stages", "2"],
     "invalid choice: 'pipedream' (choose from 'gpipe', '1f1b', 'interleaved-1f1b'"),
])
def test_bad_schedule_input_is_refused_before_any_process(capsys, tmp_path, argv, needle):
    if needle is None:
        return
    started = time.monotonic()
    code, _, err = cli(capsys, "sweep", "--model", TINY, *argv, "--sample", "2",
                       "--store", tmp_path / "s.sqlite", "--out", tmp_path / "w.json")
    assert code == 2 and needle in err, err
    assert "Traceback" not in err and not (tmp_path / "w.json").exists()
    assert not (tmp_path / "s.sqlite").exists() or time.monotonic() - started < 60


def test_interleaved_rounds_rule_allows_what_torch_allows():
    from mcap.core import schedules
    schedules.get("interleaved-1f1b").check(2, 2, 6)  # 6 micro-batches, 3 rounds: fine
