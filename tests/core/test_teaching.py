"""The teaching view's words, numbers and limits (mcap.core.teaching, issue 26): its peaks are
the ones every page shows, its sentences follow the curves it draws, and what the profile
cannot tell is said."""
import pytest

from mcap.core.errors import McapError
from mcap.core.teaching import lesson, plural
from mcap.core.types import Run, Setup

PARAMS = (1000, 2000, 3000, 4000, 5000, 6000)
PEAKS = (50_000, 40_000, 30_000)
BAL = (2, 2, 2)


def _setup(**kw):
    base = dict(stages=3, batch_size=8, chunks=4, schedule="gpipe", checkpoint="except_last")
    return Setup(**{**base, **kw})


def test_peaks_at_the_profiled_setup_are_the_given_ones():
    les = lesson(BAL, "gpipe", 4, _setup(), PARAMS, PEAKS)
    assert les.timeline.peaks == PEAKS and les.predicted == PEAKS and les.levels


def test_checkpointing_words_match_the_curve():
    """The page said that with checkpointing only each stage's input is kept, while its
    chart added a full share per micro-batch in flight (issue 26, 2)."""
    les = lesson(BAL, "gpipe", 4, _setup(), PARAMS, PEAKS)
    words = " ".join(les.lines)
    assert "keeps only the stage's input" in words and "at most 1 micro-batch at a time" in words
    t = les.timeline
    for d in range(3):  # checkpointed forwards do not raise the level: no growth per in flight
        static = t.stage_memory[d].static + t.stage_memory[d].fixed
        forwards = [o for o in t.ops if o.device == d and o.kind == "F" and o.microbatch < 3]
        assert all(t.memory[d][o.start] == static for o in forwards)
    never = lesson(BAL, "gpipe", 4, _setup(checkpoint="never"), PARAMS, PEAKS)
    assert "checkpointing" not in " ".join(never.lines).replace("Without checkpointing", "")
    assert never.timeline.peaks == PEAKS
    # the curve climbs with every forward without checkpointing
    first = never.timeline.memory[0]
    assert first[0] < first[1] < first[2] < first[3]


def test_another_microbatch_count_draws_no_levels_and_says_why():
    """At 8 micro-batches the page drew +46% on a device whose measured peaks at 1, 2, 4 and 8
    micro-batches are flat or falling (issue 26, 2): the profile cannot tell."""
    les = lesson(BAL, "gpipe", 8, _setup(), PARAMS, PEAKS)
    assert not les.levels
    words = " ".join(les.lines)
    assert "measured with 4 micro-batches of 2 samples, not 8" in words and "cannot tell" in words
    assert not any("Highest" in line for line in les.lines)


def test_another_schedule_is_an_estimate_the_page_names():
    les = lesson(BAL, "1f1b", 4, _setup(), PARAMS, PEAKS)
    assert les.levels and not les.at_profiled_setup
    assert any("not 1F1B" in u and "measure it under 1F1B" in u for u in les.unknowns)
    assert not any("--" in u or "mcap." in u for u in les.unknowns)  # plain words (issue 40 item 12)
    assert any("first device holds the most because" in line for line in les.lines)


def test_g_and_m_are_defined_and_counts_are_plural_right():
    les = lesson(BAL, "gpipe", 1, _setup(chunks=1), PARAMS, PEAKS)
    words = " ".join(les.lines)
    assert "G = 3 stages" in words and "M = 1 micro-batch of 8 samples" in words
    assert "1 micro-batches" not in words and "all 1 forwards" not in words
    assert plural(1, "micro-batch") == "1 micro-batch" and plural(2, "micro-batch") == "2 micro-batches"


def test_measured_peaks_and_breakdown_are_stated_from_the_run():
    from mcap.core.types import MemoryBreakdown
    run = Run(BAL, "ok", (51_000, 39_000, 30_500), 1.0,
              breakdown=tuple(MemoryBreakdown(1, 2, 3, 4) for _ in range(3)))
    les = lesson(BAL, "gpipe", 4, _setup(), PARAMS, PEAKS, run)
    assert les.measured == run.peaks
    words = " ".join(les.lines)
    assert "device 0 was the fullest" in words and "within 2.6%" in words
    assert "Measured at device 0's peak" in words


def test_bad_inputs_name_the_values():
    with pytest.raises(McapError, match="9 micro-batches: the profile's batch of 8 samples makes 1 to 8"):
        lesson(BAL, "gpipe", 9, _setup(), PARAMS, PEAKS)
    with pytest.raises(McapError, match="schedule 'zb'"):
        lesson(BAL, "zb", 4, _setup(), PARAMS, PEAKS)
