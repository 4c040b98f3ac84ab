"""The ``workspace`` predictor: a library workspace a stage process pays once if it holds a
layer of some kinds (cuBLAS on a GPU: bench/log/2026-11-26-gpu-predictors.md), recovered from the
profile's own windows on a synthetic truth, and on the real H200 profile bundled in data/."""
from __future__ import annotations


import numpy as np
import pytest

from mcap.core import predictors
from mcap.core.evaluate import percentile
from mcap.core.profiling.schedule import profiling_plan
from mcap.core.predictors.workspace import LIBRARY, PAID_BY, STEP
from mcap.core.profiling.stats import extract, stage_windows
from mcap.core.types import Layer, ModelInfo, Profile, Run, Setup
from mcap.core.partition import enumerate_all
from tests.conftest import DATA

# A toy VGG: convolutions, then a classifier whose Linear layers call the library (as
# cuBLAS on a GPU; cuDNN never does), with parameter-free layers between them.
PARAMS = (40, 0, 90, 0, 70, 0, 0, 20, 0, 0, 15, 5)
KINDS = ("Conv2d", "ReLU", "Conv2d", "ReLU", "Conv2d", "MaxPool2d", "Flatten", "Linear",
         "ReLU", "Dropout", "Linear", "Linear")
ACT = (30, 12, 8, 20, 6, 9, 14, 3, 3, 7, 4, 2)  # bytes a stage's input boundary costs
L, G = len(PARAMS), 4
LIB = 777  # bytes, paid once by any stage holding a Linear


def truth_max(a: int, z: int) -> int:
    """Weights+grads+momentum (3x), temporaries the size of the largest parameter tensor
    (2x), the input boundary (test_predictors' structure, measured on VGG11)."""
    return 3 * sum(PARAMS[a:z + 1]) + 2 * max(PARAMS[a:z + 1]) + ACT[a] + 1


def truth_lib(a: int, z: int) -> int:
    """truth_max plus the workspace: once, whatever number of Linear layers the stage holds."""
    return truth_max(a, z) + (LIB if "Linear" in KINDS[a:z + 1] else 0)


def profile_of(truth, kinds=KINDS) -> Profile:
    runs = tuple(Run(tuple(b), "ok", tuple(truth(a, z) for a, z in stage_windows(b)), 1.0)
                 for b in profiling_plan(L, G).runs)
    model = ModelInfo("toy", tuple(Layer(f"l{i}", p, k) for i, (p, k) in
                                   enumerate(zip(PARAMS, kinds))))
    # cpu: the workspace term is read from the windows on any device (the CUDA optimizer
    # step's floor, which needs real parameter sizes, is checked on the H200 profile below)
    return Profile(model, Setup(stages=G), extract(runs, L), runs)


def all_balances():
    return np.concatenate(list(enumerate_all(L, G)))


def errors(costs, truth):
    bals = all_balances()
    got = costs.peaks_many(bals).max(axis=1)
    want = np.array([max(truth(a, z) for a, z in stage_windows(b)) for b in bals])
    return np.abs(got - want) / want


def test_the_workspace_and_the_kind_that_pays_it_are_read_from_the_profile():
    prof = profile_of(truth_lib)
    ws = predictors.fit(prof, "workspace")
    assert ws.details[PAID_BY] == ["Linear"]
    # W is searched, not solved, beside per-layer max terms that can take a few bytes of it
    assert abs(ws.details[LIBRARY] - LIB) < 0.05 * LIB
    assert errors(ws, truth_lib).max() < 0.002  # every one of the 165 partitionings
    # Listing 1.1 counts it once per "first Linear of a window": the others cannot be right
    for name in ("paper", "maxparam", "perstage"):
        assert errors(predictors.fit(prof, name), truth_lib).max() > 0.05, name


def test_a_mem_added_read_across_a_pair_that_already_paid_keeps_none_of_it():
    # Which window pair a mem_added is read on (3.1) decides whether it holds the workspace:
    # l7's (prefixes 0..6 / 0..7) and l10's (9..9 / 9..10: the plan has no prefix that
    # long) hold it, since only the larger window holds a Linear; l11's (10..10 / 10..11)
    # holds none; every Linear's mem_isolated holds it. Subtracting the term from every window that holds
    # a Linear before reading the statistics (base.Windows) leaves it in none of them.
    from mcap.core.predictors.base import Windows
    from mcap.core.predictors.workspace import library_term
    prof, plain = profile_of(truth_lib), profile_of(truth_max)
    raw = [a - b for a, b in zip(prof.stats.mem_added[1:], plain.stats.mem_added[1:])]
    assert raw == [LIB if l in (7, 10) else 0 for l in range(1, L)]
    assert [a - b for a, b in zip(prof.stats.mem_isolated, plain.stats.mem_isolated)] == \
        [LIB if k == "Linear" else 0 for k in KINDS]
    term = library_term([int(k == "Linear") for k in KINDS], LIB)
    assert Windows(prof.runs, L).score((term,)).stats == plain.stats


def test_without_kinds_the_layers_that_pay_are_read_one_by_one():
    prof = profile_of(truth_lib, kinds=("",) * L)  # a file written before kinds were recorded
    ws = predictors.fit(prof, "workspace")
    paid = set(ws.details[PAID_BY])
    assert paid <= {"l7", "l10", "l11"} and paid
    assert errors(ws, truth_lib).max() < errors(predictors.fit(prof, "perstage"), truth_lib).max()


def test_nothing_paid_once_per_process_leaves_perstage_as_it_is():
    prof = profile_of(truth_max)
    ws, ps = predictors.fit(prof, "workspace"), predictors.fit(prof, "perstage")
    assert LIBRARY not in ws.details
    bals = all_balances()
    assert (ws.peaks_many(bals) == ps.peaks_many(bals)).all()


# --- the real GPU profile (data/PROVENANCE.md: one H200, main 78cb9fd) ------------------------

H200 = DATA / "vgg11-h512-b8-h200x4.profile.json"
H200_SWEEP = DATA / "vgg11-h512-b8-h200x4-sample150-seed5.sweep.json"


@pytest.fixture(scope="module")
def h200():
    from mcap.io import jsonio
    return jsonio.load_profile(H200), jsonio.load_sweep(H200_SWEEP)


def _overall(costs, sweep):
    ok = [r for r in sweep.runs if r.status == "ok"]
    pred = costs.peaks_many(np.asarray([r.balance for r in ok])).max(axis=1)
    meas = np.asarray([max(r.peaks) for r in ok])
    return np.abs(pred - meas) / meas


def _per_stage(costs, sweep):
    ok = [r for r in sweep.runs if r.status == "ok"]
    pred = costs.peaks_many(np.asarray([r.balance for r in ok]))
    meas = np.asarray([r.peaks for r in ok])
    return (np.abs(pred - meas) / meas).ravel()


def test_on_the_h200_profile_the_linears_pay_cublas_once_per_stage(h200):
    profile, sweep = h200
    ws = predictors.fit(profile, "workspace")
    # cuBLAS 32 MiB per thread that multiplies (forward + autograd's backward) + cuBLASLt
    assert ws.details[PAID_BY] == ["Linear"]
    assert 64 * 2**20 <= ws.details[LIBRARY] <= 66 * 2**20
    # at its step a stage holds 4x its parameters (SGD's foreach weight-decay copy on CUDA)
    assert ws.details[STEP] == 4
    # measured on the 150 partitionings the fit never saw (bench/log/2026-11-26-gpu-predictors.md)
    assert percentile(_overall(ws, sweep), 90) < 0.03
    assert percentile(_per_stage(ws, sweep), 90) < 0.04
    # without the workspace term: 59.8% at p90 before issue 29, 34.3% since last stages are
    # read from the right (mcap.core.predictors.positional), still ten times workspace's
    assert percentile(_overall(predictors.fit(profile, "perstage"), sweep), 90) > 0.3
    # a classifier stage is paid for once, not once per Linear (issue 30: 135 vs 70 MiB;
    # perstage now returns this measured last window itself, issue 29)
    assert ws.stage(26, 29) < 72 * 2**20


def test_on_the_h200_profile_without_kinds_the_three_linears_are_found(h200):
    import dataclasses
    profile, sweep = h200
    layers = tuple(dataclasses.replace(l, kind="") for l in profile.model.layers)
    bare = dataclasses.replace(profile, model=dataclasses.replace(profile.model, layers=layers))
    ws = predictors.fit(bare, "workspace")
    assert ws.details[PAID_BY] == ["fc1", "fc2", "fc3"]
    assert percentile(_overall(ws, sweep), 90) < 0.03


# --- the step also holds every micro-batch's boundary activations ----------------------------

def _cuda_toy():
    """A toy VGG stage process on a GPU (sizes in KiB, multiples of the allocator's 512 B):
    big activations early, big weights late, a classifier that pays the library once. The
    backward holds 3x the parameters and the recomputed activations, the step 4x the
    parameters (SGD's foreach copy); both hold ``chunks x (input + output)`` of the
    boundary activations (the receive buffers, the sends' tensors)."""
    from mcap.core.types import StageTimes
    k = 1024
    params = tuple(x * k for x in (4, 0, 0, 600, 0, 2300, 0, 9000, 0, 9000, 0, 1000, 0, 20))
    kinds = ("Conv2d", "ReLU", "MaxPool2d", "Conv2d", "ReLU", "Conv2d", "MaxPool2d", "Conv2d",
             "ReLU", "Conv2d", "Flatten", "Linear", "ReLU", "Linear")
    out = tuple(x * k for x in (512, 512, 128, 256, 256, 128, 32, 64, 64, 16, 16, 4, 4, 0))
    recomputed = tuple(x * k for x in (1500, 600, 300, 900, 300, 700, 100, 400, 100, 200, 20,
                                       30, 10, 10))
    chunks, n, lib = 4, len(params), 65 * 2**20

    def edge(a, z):
        return chunks * ((out[a - 1] if a else 0) + out[z])

    def truth(a, z):
        backward = 3 * sum(params[a:z + 1]) + sum(recomputed[a:z + 1]) + edge(a, z)
        step = 4 * sum(params[a:z + 1]) + edge(a, z)
        return max(backward, step) + (lib if "Linear" in kinds[a:z + 1] else 0)

    def times(b):
        return tuple(StageTimes(((0.0,),), ((0.0,),), (0.0,), out[a - 1] if a else 0,
                                out[z] if z < n - 1 else 0) for a, z in stage_windows(b))

    runs = tuple(Run(tuple(b), "ok", tuple(truth(a, z) for a, z in stage_windows(b)), 1.0,
                     times=times(b)) for b in profiling_plan(n, G).runs)
    model = ModelInfo("toy", tuple(Layer(f"l{i}", p, k) for i, (p, k) in
                                   enumerate(zip(params, kinds))))
    prof = Profile(model, Setup(stages=G, batch_size=8, chunks=chunks, device="cuda"),
                   extract(runs, n), runs)
    return prof, truth, edge


def test_the_step_holds_every_micro_batch_boundary_read_from_the_runs():
    import dataclasses
    from mcap.core.predictors.workspace import BOUNDARY, boundary_table
    prof, truth, edge = _cuda_toy()
    n = len(prof.model.layers)
    table = boundary_table(prof)
    assert all(table.stage(a, z) == edge(a, z) for a in range(n) for z in range(a, n))
    bals = np.concatenate(list(enumerate_all(n, G)))
    want = np.array([[truth(a, z) for a, z in stage_windows(b)] for b in bals])

    def worst(costs):
        return float((np.abs(costs.peaks_many(bals).max(axis=1) - want.max(axis=1))
                      / want.max(axis=1)).max())

    ws = predictors.fit(prof, "workspace")
    assert ws.details[BOUNDARY] == 4 and ws.details[STEP] == 4
    assert worst(ws) < 0.001  # every one of the 286 partitionings
    # runs that did not record what their stages exchange (older files): the step alone
    bare = dataclasses.replace(prof, runs=tuple(dataclasses.replace(r, times=None)
                                                for r in prof.runs))
    plain = predictors.fit(bare, "workspace")
    assert BOUNDARY not in plain.details and boundary_table(bare) is None
    assert worst(plain) > 0.02


def test_boundary_bytes_need_every_boundary_recorded_alike():
    import dataclasses
    from mcap.core.predictors.workspace import boundary_bytes
    prof, _, _ = _cuda_toy()
    assert boundary_bytes(prof)[-1] == 0 and (boundary_bytes(prof)[:-1] > 0).all()

    def without_times(i):
        return dataclasses.replace(prof, runs=tuple(
            dataclasses.replace(r, times=None) if j == i else r for j, r in enumerate(prof.runs)))

    # a run whose stages ran together (no times): the others may or may not cover every
    # boundary it held; the plan's first run, (1, 1, 6, 6), is the only one with a stage
    # ending at layer 0
    got = [boundary_bytes(without_times(i)) for i in range(len(prof.runs))]
    assert got[0] is None
    assert any(g is not None and (g == boundary_bytes(prof)).all() for g in got[1:])
    r = prof.runs[0]
    t0 = dataclasses.replace(r.times[0], send_bytes=r.times[0].send_bytes + 512)
    odd = dataclasses.replace(prof, runs=(dataclasses.replace(r, times=(t0, *r.times[1:])),
                                          *prof.runs[1:]))
    assert boundary_bytes(odd) is None  # two records of one boundary disagree: not trusted


# --- the clean H200 pair: every stage run alone (data/PROVENANCE.md) --------------------------

ALONE = DATA / "vgg11-h512-b8-h200x4-alone.profile.json"
ALONE_SWEEP = DATA / "vgg11-h512-b8-h200x4-alone-sample150-seed5.sweep.json"


@pytest.fixture(scope="module")
def alone():
    from mcap.io import jsonio
    return jsonio.load_profile(ALONE), jsonio.load_sweep(ALONE_SWEEP)


def test_on_the_clean_h200_pair_the_step_holds_the_boundary_activations(alone):
    import dataclasses
    from mcap.core.predictors.workspace import BOUNDARY
    profile, sweep = alone
    ws = predictors.fit(profile, "workspace")
    assert ws.details[BOUNDARY] == profile.setup.chunks == 4
    bare = dataclasses.replace(profile, runs=tuple(dataclasses.replace(r, times=None)
                                                   for r in profile.runs))
    before = predictors.fit(bare, "workspace")
    assert BOUNDARY not in before.details
    # the 150 partitionings the fit never saw (bench/log/2026-11-26-h200-predictor-error.md):
    # per stage p90
    # 2.89% -> 2.51%; the overall peak is not moved (2.38%: what remains is the allocator's
    # unsplit blocks, next test, which no profile-fitted term here predicts)
    assert percentile(_per_stage(ws, sweep), 90) < 0.026 < percentile(_per_stage(before, sweep), 90)
    assert percentile(_overall(ws, sweep), 90) == pytest.approx(
        percentile(_overall(before, sweep), 90), abs=1e-4)
    assert percentile(_overall(ws, sweep), 90) < 0.025


def test_the_clean_h200_overall_peaks_are_the_step_to_the_byte(alone):
    """The decomposition in bench/log/2026-11-26-h200-predictor-error.md (a statement about the
    data, not a predictor): every partitioning's fullest stage peaks at its optimizer step, at
    4 x its parameters (each tensor one 512 B block) + 4 micro-batches of its boundary
    activations + 65 MiB of cuBLAS / cuBLASLt workspaces if it holds a Linear, + 1 MiB
    more if a Linear and the layer after it share the stage, + 896 KiB for each convolution
    of 4.5 MiB or more when conv3_1 is on the stage too (its 1152 KiB weight-sized tensors
    handed the 2 MiB leftovers of 20 MiB segments unsplit: the caching allocator splits a
    large block only when more than 1 MiB remains), + 2 KiB on the first stage."""
    from mcap.core import forcuda
    from mcap.core.predictors.workspace import boundary_table
    profile, sweep = alone
    layers = profile.model.layers
    names = [l.name for l in layers]
    step = forcuda.step_table([l.param_bytes for l in layers], "sgd")
    edges = boundary_table(profile)
    linear = [i for i, l in enumerate(layers) if l.kind == "Linear"]
    big = [i for i, l in enumerate(layers) if l.param_bytes >= 4 * 2**20]
    conv3_1 = names.index("conv3_1")
    unsplit = 2 * 2**20 - (layers[conv3_1].param_bytes - 256 * 4)  # weight, less the bias

    def peak(a, z):
        p = step.stage(a, z) + edges.stage(a, z)
        if any(a <= i <= z for i in linear):
            p += 65 * 2**20
        if any(a <= i < z for i in linear):
            p += 2**20
        if a <= conv3_1 <= z:
            p += unsplit * sum(1 for i in big if a <= i <= z)
        if a == 0:
            p += 4 * 512  # four blocks of 512 B more on the first stage (not identified)
        return p

    assert unsplit == 896 * 1024
    ok = [r for r in sweep.runs if r.status == "ok"]
    assert len(ok) == 150
    for r in ok:
        assert max(peak(a, z) for a, z in stage_windows(r.balance)) == max(r.peaks), r.balance
