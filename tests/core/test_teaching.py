"""The teaching view's words, numbers and limits (mcap.core.teaching, issues 26 and 40): its
peaks are the ones every page shows, every schedule is drawn from its own action list, its
sentences follow the curves it draws (checked against the chart's data on every bundled
profile under every schedule), and what the profile cannot tell is said."""
import functools
import re

import pytest

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.teaching import (
    calibration_request, fitting_chunks, lesson, max_chunks, of_profile, peak_parts, plural,
    without_checkpointing)
from mcap.core.timeline import simulate
from mcap.core.types import MemoryBreakdown, Run, Setup
from mcap.figures import timeline as fig_tl
from mcap.io import datasets
from mcap.runner.orders import generate

PARAMS = (1000, 2000, 3000, 4000, 5000, 6000)
PEAKS = (50_000, 40_000, 30_000)
BAL = (2, 2, 2)


def _setup(**kw):
    base = dict(stages=3, batch_size=8, chunks=4, schedule="gpipe", checkpoint="except_last")
    return Setup(**{**base, **kw})


def _lesson(schedule="gpipe", chunks=4, setup=None, run=None, run_setup=None, virtual=None,
            balance=BAL, predicted=PEAKS):
    setup = setup or _setup()
    al = generate(schedule, setup.stages, virtual, chunks)
    cal = generate(*calibration_request(setup, len(balance)))
    return lesson(balance, al, setup, PARAMS, predicted, cal, run, run_setup)


def words(les) -> str:
    return " ".join(les.lines)


def test_peaks_at_the_profiled_setup_are_the_given_ones():
    les = _lesson()
    assert les.timeline.peaks == PEAKS and les.predicted == PEAKS and les.levels
    assert les.at_profiled_setup


def test_checkpointing_words_match_the_curve_and_say_why_two():
    """except_last under torch's GPipe holds 2 micro-batches' activations at the peak: the
    last one's, kept, while micro-batch 0 recomputes in its backward (issue 40, 7)."""
    les = _lesson()
    text = words(les)
    assert "keeps only the stage's input" in text and "at most 2 micro-batches at a time" in text
    assert "micro-batch 0 recomputes its activations in its backward while micro-batch 3 " \
           "still keeps its own: 2 at once" in text
    t = les.timeline
    for d in range(3):  # checkpointed forwards do not raise the level: no growth per in flight
        static = t.stage_memory[d].static + t.stage_memory[d].fixed
        forwards = [o for o in t.ops if o.device == d and o.kind == "F" and o.microbatch < 3]
        assert all(t.memory[d][o.start] == static for o in forwards)
    never = _lesson(setup=_setup(checkpoint="never"))
    assert "checkpointing" not in words(never).replace("Without checkpointing", "")
    assert never.timeline.peaks == PEAKS
    first = never.timeline.memory[0]  # the curve climbs with every forward
    assert first[0] < first[1] < first[2] < first[3]


def test_another_microbatch_count_draws_no_levels_and_says_why():
    """At 8 micro-batches the page drew +46% on a device whose measured peaks at 1, 2, 4 and 8
    micro-batches are flat or falling (issue 26, 2): the profile cannot tell."""
    les = _lesson(chunks=8)
    assert not les.levels
    assert "measured with 4 micro-batches of 2 samples, not 8" in words(les) and "cannot tell" in words(les)
    assert not any("Highest" in line for line in les.lines)


def test_another_schedule_is_an_estimate_compared_with_the_profiles_own():
    les = _lesson("1f1b")
    assert les.levels and not les.at_profiled_setup
    assert any("not 1F1B" in u and "measure it under 1F1B" in u for u in les.unknowns)
    assert not any("--" in u or "mcap." in u for u in les.unknowns)  # plain words (issue 40 item 12)
    text = words(les)
    # issue 40, 7: "the most micro-batches in flight", never "the most memory"
    assert "The first device holds the most because" not in text
    assert "Device 0 has the most in flight" in text and "not necessarily the most memory" in text
    # issue 40, 6: how it compares with GPipe's levels and why, from the counts
    assert "Against GPipe, the schedule the profile measured" in text
    assert "(GPipe: 4, 4, 4; 1F1B: 3, 2, 1) matter little" in text


def test_g_and_m_are_defined_and_counts_are_plural_right():
    les = _lesson(chunks=1, setup=_setup(chunks=1))
    text = words(les)
    assert "G = 3 stages" in text and "M = 1 micro-batch of 8 samples" in text
    assert "1 micro-batches" not in text and "all 1 forwards" not in text
    assert plural(1, "micro-batch") == "1 micro-batch" and plural(2, "micro-batch") == "2 micro-batches"


def test_measured_peaks_are_named_by_their_schedule_and_drawn_only_under_it():
    """1F1B drew GPipe's measured peaks, unlabelled (issue 40, 6)."""
    run = Run(BAL, "ok", (51_000, 39_000, 30_500), 1.0,
              breakdown=tuple(MemoryBreakdown(1, 2, 3, 4) for _ in range(3)))
    les = _lesson(run=run)
    assert les.measured == run.peaks and les.measured_under == "GPipe, 4 micro-batches"
    text = words(les)
    assert "Measured under GPipe, 4 micro-batches: device 0 was the fullest" in text
    assert "within 2.6%" in text and "Measured at device 0's peak" in text
    other = _lesson("1f1b", run=run)
    assert other.measured is None and "Measured under" not in words(other)
    assert any("measured under GPipe, 4 micro-batches, not under 1F1B" in u for u in other.unknowns)
    # a run measured under the schedule drawn is drawn there
    mine = _lesson("1f1b", run=run, run_setup=_setup(schedule="1f1b"))
    assert mine.measured == run.peaks and "Measured under 1F1B, 4 micro-batches" in words(mine)


def test_several_stages_per_device_and_split_backwards_are_said():
    setup = _setup(stages=2)
    les = lesson((1,) * 4, generate("zbv", 2, 2, 4), setup, (1000,) * 4, (9000,) * 4,
                 generate(*calibration_request(setup, 4)))
    text = words(les)
    assert "each holding V = 2 stages" in text and "device 0 stages 0 and 3" in text
    assert "I computes the gradients of the stage's inputs" in text
    assert any("Each device holds 2 stages here" in u for u in les.unknowns)
    assert any("until its W" in u for u in les.unknowns)


def test_bad_inputs_name_the_values():
    with pytest.raises(McapError, match="9 micro-batches: the profile's batch of 8 samples makes 1 to 8"):
        _lesson(chunks=9)
    with pytest.raises(McapError, match="needs 6 layer counts, got 2-2-2"):
        _lesson("interleaved-1f1b", virtual=2)
    with pytest.raises(McapError, match="needs at least as many micro-batches as stages"):
        fitting_chunks("1f1b", 8, 1, 2, 2)
    assert fitting_chunks("dualpipev", 4, 2, 4, 8) == (8, fitting_chunks("dualpipev", 4, 2, 4, 8)[1])
    assert "chunks 4 < 8" in fitting_chunks("dualpipev", 4, 2, 4, 8)[1]
    assert fitting_chunks("gpipe", 4, 1, 4, 8) == (4, "")


# --- every sentence against the chart's data, every bundled profile, every schedule -------

PROFILES = [r for r in datasets.bundled() if r.kind == "profile"]


@functools.lru_cache(maxsize=None)
def _profile(param):
    return datasets.load(datasets.parse_ref(param))


def _mib(n) -> str:
    return f"{n / 2**20:.1f} MiB"


def _facts(t):
    """What the chart shows, read off its data frames (not off the lesson)."""
    ops, mem = fig_tl.ops_frame(t), fig_tl.memory_frame(t)
    warm = []
    for d in range(t.stages):
        mine = ops[ops.device == d].sort_values("start")
        kinds = list(mine.kind)
        warm.append(kinds.index(next(k for k in kinds if k != "F")))
    peaks = [int(mem[mem.device == d].memory.max()) for d in range(t.stages)]
    flight = [int(mem[mem.device == d].in_flight.max()) for d in range(t.stages)]
    return warm, peaks, flight


def _units(t, d):
    """Micro-batches whose activations are on device d at its peak step, from the ops."""
    step = t.peak_steps[d]
    back = {(o.chunk, o.microbatch) for o in t.ops if o.device == d and o.kind != "F"
            and o.start <= step}
    done = {(o.chunk, o.microbatch) for o in t.ops if o.device == d and o.kind in ("B", "W")
            and o.end <= step}
    return sum(1 for c, m in t.held[d][step]
               if not t.checkpointed(m, c) or ((c, m) in back and (c, m) not in done))


@pytest.mark.parametrize("ref", PROFILES, ids=lambda r: r.key)
def test_every_sentence_follows_the_chart_on_every_bundled_profile_under_every_schedule(ref):
    profile = _profile(ref.param)
    s = profile.setup
    G, L = s.stages, profile.model.num_layers
    drawn = 0
    for name in schedules.names():
        v = schedules.get(name).virtual(None)
        n = G * v
        if n > L:
            with pytest.raises(McapError, match=f"needs {n} chunks"):
                schedules.get(name).check(G, v, s.chunks, L)
            continue
        try:
            m, _ = fitting_chunks(name, G, v, s.chunks, max_chunks(s))
        except McapError as exc:
            assert "cannot run" in str(exc)
            continue
        balance = tuple(L // n + (1 if i < L % n else 0) for i in range(n))
        les = of_profile(profile, balance, generate(name, G, v, m),
                         generate(*calibration_request(s, n)))
        _check_sentences(les, name, G, m)
        drawn += les.levels
    assert drawn >= 1  # at least the profile's own schedule draws levels at its own count


def _check_sentences(les, name, G, m):
    t = les.timeline
    text = words(les)
    warm, peaks, flight = _facts(t)
    label = schedules.get(name).label
    assert f"M = {plural(m, 'micro-batch')}" in text
    if all(w == t.virtual * m for w in warm):
        assert f"{label} runs all {t.virtual * m} forwards of a device before any" in text
    else:
        for d, w in enumerate(warm):
            assert f"device {d} runs {plural(w, 'forward')}" in text
    assert "Most micro-batches in flight at once: " + ", ".join(
        f"device {d}: {h}" for d, h in enumerate(flight)) + "." in text
    assert "The first device holds the most because" not in text
    hit = re.search(r"Device (\d+) has the most in flight", text)
    if hit:
        assert int(hit.group(1)) == flight.index(max(flight))
    if not les.levels:
        assert "Highest" not in text and f"not {m}" in text
        return
    top = peaks.index(max(peaks))
    assert f"Highest: device {top} at {_mib(peaks[top])} ({peaks[top]:,} bytes)" in text
    if hit and int(hit.group(1)) != top:
        assert f"the fullest device here is device {top}" in text
    if les.at_profiled_setup:
        assert tuple(peaks) == les.predicted  # Predict's numbers, to the byte
    units = [_units(t, d) for d in range(G)]
    most = re.search(r"at most (\d+) micro-batch", text)
    if most:
        assert int(most.group(1)) == max(units)
    if les.profiled is not None and not les.at_profiled_setup:
        other = les.profiled.peaks
        for d in range(G):
            diff = peaks[d] - other[d]
            if diff < 0:
                assert f"device {d} lower by {_mib(-diff)}" in text
            elif diff > 0:
                assert f"device {d} higher by {_mib(diff)}" in text
        if "matter little" in text:
            assert f"({label}: " + ", ".join(str(u) for u in units) + ";" in text
    for p in (peak_parts(t, d) for d in range(G)):
        assert p.parameter_state + p.fixed + p.activations == p.peak


def test_a_checkpointed_profile_offers_its_twin_without_checkpointing():
    profiles = [_profile(r.param) for r in PROFILES]
    default = _profile("bundled:vgg11-h512-b8-cpu4.profile.json")
    i = without_checkpointing(default, profiles)
    assert i is not None and profiles[i].setup.checkpoint == "never"
    assert profiles[i].model.num_layers == default.model.num_layers
    assert without_checkpointing(profiles[i], profiles) is None
    # there the usual lesson shows: 1F1B holds fewer in flight and is lower, device by device
    twin = profiles[i]
    bal = (8, 8, 7, 7)
    cal = generate(*calibration_request(twin.setup, 4))
    gp = of_profile(twin, bal, generate("gpipe", 4, 1, 4), cal).timeline
    ob = of_profile(twin, bal, generate("1f1b", 4, 1, 4), cal).timeline
    assert all(a <= b for a, b in zip(ob.peaks, gp.peaks)) and ob.peaks[-1] < gp.peaks[-1]
    # while checkpointed, 1F1B is no higher than GPipe either, and equal where 2 are held
    cal = generate(*calibration_request(default.setup, 4))
    gp = of_profile(default, bal, generate("gpipe", 4, 1, 4), cal).timeline
    ob = of_profile(default, bal, generate("1f1b", 4, 1, 4), cal).timeline
    assert ob.peaks[:3] == gp.peaks[:3] and ob.peaks[3] < gp.peaks[3]


def test_the_profiled_timeline_is_the_calibration_replayed():
    les = _lesson("1f1b")
    cal = generate(*calibration_request(_setup(), 3))
    again = simulate(cal, BAL, les.timeline.stage_memory, checkpoint="except_last")
    assert les.profiled.peaks == again.peaks == PEAKS
