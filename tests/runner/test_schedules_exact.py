"""Every schedule, measured by torch's own schedule object and predicted from two profiles,
to the byte on the CPU (issue 39, Targets: "a test per schedule").

A tiny GPT (6 layers) is profiled twice with mCAP's plan, stages run alone: under GPipe on
4 stages (the F and B ops) and under interleaved zero bubble on 2 ranks x 2 (the I and W
ops). Every schedule then measures partitionings none of whose chunk sets was profiled, on
2 ranks; the op model (``mcap.core.schedules``) predicts each rank's peak from the profiles
alone, and the runner's recorded ops are the action list's."""
import pytest

from mcap.core.profiling.schedule import profiling_plan
from mcap.core.schedules import names
from mcap.core.schedules.memory import split_plan
from mcap.core.schedules.predict import RankCosts, event_model
from mcap.core.types import LayerStats, Profile, Setup
from mcap.runner import open_runner
from mcap.runner.orders import generate
from mcap.workflow.measuring import with_out_bytes

# One xdist worker for the whole file: the module fixture ``model`` (two real profiles)
# was made once in each worker when its tests were split.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("runner-schedules_exact")]

SPEC = "gpt:layers=4,hidden=16,heads=2,vocab=32,seq=4"
BASE = dict(batch_size=8, chunks=4, checkpoint="never")


def _profile(setup: Setup) -> Profile:
    """The profile command's runs (its plan: mCAP's, and for a split backward the shifted
    one too), measured directly."""
    with open_runner(SPEC, setup, isolation="stage") as r:
        info = with_out_bytes(r.model_info, setup)
        n = setup.num_chunks
        plan = profiling_plan(info.num_layers, n).runs
        if setup.schedule == "interleaved-zb":
            plan = split_plan(plan, profiling_plan(info.num_layers - 1, n - 1).runs)
        runs = tuple(r.measure(b) for b in plan)
    assert all(run.status == "ok" for run in runs), [run.error for run in runs]
    return Profile(info, setup, LayerStats((1,) * info.num_layers,
                                           (None,) + (0,) * (info.num_layers - 1)), runs)


@pytest.fixture(scope="module")
def model():
    gpipe = _profile(Setup(stages=4, schedule="gpipe", **BASE))
    zb = _profile(Setup(stages=2, schedule="interleaved-zb", virtual_stages=2, **BASE))
    planned = {tuple(r.balance) for r in zb.runs}  # the 4-chunk partitionings profiled
    return event_model([gpipe, zb], generate), planned


@pytest.mark.parametrize("schedule", names())
def test_predicted_rank_peaks_equal_measured_ones_to_the_byte(model, schedule):
    m, planned = model
    v = 1 if schedule in ("gpipe", "1f1b") else 2
    setup = Setup(stages=2, schedule=schedule, virtual_stages=v, **BASE)
    al = generate(schedule, 2, v, setup.chunks)
    balances = [(2, 4), (5, 1)] if v == 1 else [(1, 1, 3, 1), (2, 2, 1, 1)]
    with open_runner(SPEC, setup, isolation="stage") as r:
        for balance in balances:
            run = r.measure(balance)
            assert run.status == "ok", run.error
            for rank, times in enumerate(run.times):  # torch ran the action list
                ran = [(e[0], e[6] if len(e) > 6 else rank, e[2]) for e in times.memory
                       if e[0] in "FBIW" and e[1] == 0]
                assert ran == [(a.kind, a.stage, a.microbatch) for a in al.actions(rank)]
            assert RankCosts(m, al).peaks(balance) == run.peaks, (schedule, balance)
    assert not planned & set(balances)  # none of them was a profiling run
