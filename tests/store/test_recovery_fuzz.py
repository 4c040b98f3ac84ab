"""The recovery file fuzzed (issue 38, item 1): links, foreign files and mutated lines, each
ending in exit 0 or 2 with every victim unchanged (tests/store/recoveryfuzz.py); a fast
subset here, bench/bench_fuzz.py --only recovery runs >= 300."""
from __future__ import annotations

from tests.store import recoveryfuzz


def test_every_kind_of_mutation_exits_0_or_2_and_leaves_victims_alone(tmp_path):
    count = 2 * len(recoveryfuzz.KINDS)
    tally, findings, per_kind = recoveryfuzz.run(count, seed=38, folder=tmp_path)
    assert not findings, "\n".join(findings[:10])
    assert set(per_kind) == set(recoveryfuzz.KINDS)
    assert tally.get(2, 0) > 0 and tally.get(0, 0) > 0  # refusals and imports both happen
