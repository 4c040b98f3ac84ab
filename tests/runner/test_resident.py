"""Only the stage's layers are materialised (issue 41, item 2): a stage process keeps the
model on the meta device and builds its stage's layers on its device; nothing of the rest
of the model is allocated, and the stage's memory is what the whole-model copy gave."""
import pytest
import torch

from mcap.core.types import Setup
from mcap.models.spec import trusted
from mcap.runner import open_runner
from mcap.runner.resident import build_resident

SPEC = "gpt:layers=4,hidden=32"
SETUP = Setup(stages=2, batch_size=4, chunks=2)


def test_the_resident_model_is_meta_and_a_stage_gets_only_its_layers():
    res, info = build_resident(SPEC, SETUP)
    assert res.meta and all(p.device.type == "meta" for p in res.module.parameters())
    layers = res.stage_layers(1, 2, "cpu")
    assert len(layers) == 2 and all(p.device.type == "cpu" for p in layers.parameters())
    held = sum(p.numel() * p.element_size() for p in layers.parameters())
    assert held == info.layers[1].param_bytes + info.layers[2].param_bytes
    assert all(torch.isfinite(p).all() for p in layers.parameters())
    assert all(p.device.type == "meta" for p in res.module.parameters())  # left as it was


@pytest.mark.integration
@pytest.mark.parametrize("balance", [(1, 5), (3, 3), (5, 1)])
def test_a_stage_built_from_the_meta_model_peaks_as_the_whole_models_copy(balance):
    """The built-in spec (its stages materialised from the meta model) against the same
    model as a user model (built whole on the host, each stage deep-copied from it): the
    same bytes on every stage, weights, gradients and optimizer state included."""
    peaks = {}
    for name, spec in (("meta", SPEC), ("whole", trusted("tests.runner.toy_models:builtin_gpt"))):
        with open_runner(spec, SETUP, timeout=120) as r:
            run = r.measure(balance)
        assert run.status == "ok", run.error
        peaks[name] = (run.peaks, [(b.weights, b.gradients, b.optimizer) for b in run.breakdown])
    assert peaks["meta"] == peaks["whole"]
