"""The teaching view's link to mCAP's statistics (mcap.core.teachstats, issue 40, item 9): the
paragraph on mem_isolated / mem_added and the one on balancing parameters, each checked
against the numbers it names on every bundled profile."""
import pytest

from mcap.core.recommend import costs_of, recommend
from mcap.core.teachstats import balance_paragraph, statistics_paragraph, statistics_rows
from mcap.core.types import LayerStats
from mcap.figures import teaching as fig_teach
from mcap.io import datasets

PROFILES = [r for r in datasets.bundled() if r.kind == "profile"]


def _mib(n) -> str:
    return f"{n / 2**20:.1f} MiB"


def test_rows_take_each_number_apart_into_the_statistics():
    stats = LayerStats((100, 200, 300, 400), (None, 10, 20, 30))
    rows = statistics_rows(stats, (1, 3), (150, 260))
    assert [(r.first, r.last, r.isolated, r.added, r.other, r.predicted) for r in rows] == \
        [(0, 0, 100, 0, 50, 150), (1, 3, 200, 50, 10, 260)]
    assert rows[1].top_added == 3 and rows[1].paper == 250
    text = statistics_paragraph(stats, ["a", "b", "c", "d"], (1, 3), (150, 260), "workspace")
    assert "Device 1, the fullest, holds layers 1-3" in text
    assert "the largest, layer 3 (d)" in text and "adds 0.0 MiB" in text
    frame = fig_teach.stats_frame(rows)
    assert frame.values.tolist() == [[0, "0-0", 100, 0, 50, 150], [1, "1-3", 200, 50, 10, 260]]
    assert len(fig_teach.draw_stats(rows).data) == 4
    with pytest.raises(Exception, match="balance sums to 3"):
        statistics_rows(stats, (1, 2), (1, 2))


@pytest.mark.parametrize("ref", PROFILES, ids=lambda r: r.key)
def test_both_paragraphs_name_the_numbers_the_pages_show(ref):
    profile = datasets.load(ref)
    G = profile.setup.stages
    costs = costs_of(profile)
    L = profile.model.num_layers
    even = tuple(L // G + (1 if i < L % G else 0) for i in range(G))
    peaks = costs.peaks(even)
    rows = statistics_rows(profile.stats, even, peaks)
    assert all(r.isolated + r.added + r.other == p for r, p in zip(rows, peaks))
    names = [l.name for l in profile.model.layers]
    text = statistics_paragraph(profile.stats, names, even, peaks, "the default")
    top = max(range(G), key=lambda d: peaks[d])
    r = rows[top]
    assert f"Device {top}, the fullest" in text
    assert f"{_mib(r.isolated)}" in text and f"{_mib(r.paper)}" in text
    if r.other:
        assert f"says {_mib(peaks[top])}" in text
    by_params = recommend(profile, G, "params")
    by_memory = recommend(profile, G)
    params = [l.param_bytes for l in profile.model.layers]
    text = balance_paragraph((by_params.balance, by_params.predicted_peaks),
                             (by_memory.balance, by_memory.predicted_peaks), params, 3,
                             "params", "exact")
    pf = max(range(G), key=lambda d: by_params.predicted_peaks[d])
    assert f"({'params'}: {'-'.join(map(str, by_params.balance))})" in text
    assert f"device {pf} peaks at {_mib(by_params.predicted_peaks[pf])}" in text
    if by_params.balance != by_memory.balance:
        mf = max(range(G), key=lambda d: by_memory.predicted_peaks[d])
        assert f"the fullest device is device {mf} at {_mib(by_memory.predicted_peaks[mf])}" in text
        assert max(by_memory.predicted_peaks) <= max(by_params.predicted_peaks)


def test_the_default_data_shows_13_3_2_12_against_16_1_5_8():
    """The issue's example (concepts.md), with DeepSpeed's own 'parameters' rule (issue 41:
    its partition_balanced gives 13-3-2-12 where a min-max of parameter bytes gave the
    issue's 12-2-3-13): it peaks on device 3, mCAP's 16-1-5-8 lower."""
    profile = datasets.load(datasets.parse_ref("bundled:vgg11-h512-b8-cpu4.profile.json"))
    p, m = recommend(profile, 4, "params"), recommend(profile, 4)
    text = balance_paragraph((p.balance, p.predicted_peaks), (m.balance, m.predicted_peaks),
                             [l.param_bytes for l in profile.model.layers], 3, "params", "exact")
    assert "(params: 13-3-2-12)" in text and "device 3 peaks at 78.4 MiB" in text
    assert "(exact: 16-1-5-8) the fullest device is device 0 at 73.4 MiB, 6.3% lower" in text
