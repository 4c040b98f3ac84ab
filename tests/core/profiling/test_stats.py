import pytest

from mcap.core.errors import InvalidStatistics
from mcap.core.profiling.stats import extract, missing_statistics
from mcap.core.types import Run


def ok(balance, peaks):
    return Run(balance=balance, status="ok", peaks=peaks, seconds=1.0)


# 5 layers on 3 stages: R_1..R_3 plus windows for the tail.
RUNS = [ok((1, 1, 3), (100, 200, 900)),
        ok((2, 1, 2), (150, 300, 700)),
        ok((3, 1, 1), (170, 400, 500)),
        ok((1, 2, 2), (100, 480, 700)),   # PM(1..2) = 480 -> a second window with n = 1
        ok((2, 2, 1), (150, 650, 500))]   # PM(2..3) = 650


def test_paper_rule_isolated_and_prefix_added():
    s = extract(RUNS, 5)
    assert s.mem_isolated[:4] == (100, 200, 300, 400)
    assert s.mem_added[0] is None
    assert s.mem_added[1] == 150 - 100  # PM(0..1) - PM(0..0), n = 0
    assert s.mem_added[2] == 170 - 150  # n = 0 again: the smallest n wins over n = 1
    assert s.mem_added[3] == 650 - 300  # PM(2..3) - PM(2..2): no prefix reaches layer 3
    assert s.mem_added[4] == 900 - 650  # PM(2..4) - PM(2..3): n = 2 beats n = 3 (PM(3..4) - PM(3..3))


def test_oom_and_failed_runs_are_skipped_and_repeats_take_max():
    runs = RUNS + [Run(balance=(1, 1, 3), status="oom", peaks=None, seconds=0.1),
                   Run(balance=(2, 1, 2), status="failed", peaks=(1, 1, 1), seconds=0.1, error="x"),
                   ok((1, 1, 3), (110, 190, 905))]
    s = extract(runs, 5)
    assert s.mem_isolated[0] == 110 and s.mem_isolated[1] == 200  # max of the repeats


def test_missing_layers_are_named():
    with pytest.raises(InvalidStatistics, match=r"do not give mem_added for layers 3 \(needs windows"):
        extract(RUNS[:3], 5)
    with pytest.raises(InvalidStatistics, match=r"mem_isolated for layers 2, 3, 4 .*mem_added for layers 1, 3, 4 "):
        extract(RUNS[:1] + RUNS[3:4], 5)


def test_no_ok_runs():
    with pytest.raises(InvalidStatistics, match="no ok run of 5 layers.*1 oom/failed runs skipped"):
        extract([Run(balance=(1, 4), status="oom", peaks=None, seconds=0.1)], 5)


def test_two_stage_profile_derives_middle_layers():
    L = 4
    pm = {(0, 0): 100, (0, 1): 130, (0, 2): 180, (1, 3): 400, (2, 3): 300, (3, 3): 200}
    runs = [ok((k, L - k), (pm[(0, k - 1)], pm[(k, L - 1)])) for k in range(1, L)]
    s = extract(runs, L)
    assert s.mem_added == (None, 30, 50, 0)  # mem_added(L-1) assumed 0 (documented)
    assert s.mem_isolated == (100, 400 - 50, 300, 200)


def test_missing_statistics_accepts_runs_and_balances():
    assert not missing_statistics(5, RUNS)
    assert not missing_statistics(5, [r.balance for r in RUNS])
    m = missing_statistics(5, [Run(balance=(1, 1, 3), status="oom", peaks=None, seconds=0)])
    assert m.isolated == (0, 1, 2, 3, 4)
