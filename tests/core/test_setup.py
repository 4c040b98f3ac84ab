"""mcap.core.setup.matching: the sweep a profile brings with it (issue 40, item 1)."""
from mcap.core.setup import matching, mismatch
from mcap.io import datasets
from tests.conftest import DATA


def _load(name):
    return datasets.load(datasets.DatasetRef("bundled", datasets.kind_of_file(name) or "", name),
                         data_dir=DATA)


SWEEPS = sorted(p.name for p in DATA.glob("*.sweep.json"))


def _match(profile_name):
    sweeps = [_load(n) for n in SWEEPS]
    i = matching(_load(profile_name), sweeps)
    return None if i is None else SWEEPS[i]


def test_a_profile_brings_the_sweep_of_its_model_and_setup():
    assert _match("gpt2-l12-h256-s256-cpu4.profile.json") == "gpt2-l12-h256-s256-cpu4-full.sweep.json"
    assert _match("vgg11-h512-b8-cpu4.profile.json") == "vgg11-h512-b8-cpu4-full.sweep.json"
    assert _match("llama-l8-h256-s256-cpu4.profile.json") == "llama-l8-h256-s256-cpu4-full.sweep.json"


def test_the_same_machine_first_then_the_most_ok_runs():
    # both H200 sweeps match either H200 profile's model and setup; the machine fingerprint
    # (the stages measured alone or together) tells them apart
    assert _match("vgg11-h512-b8-h200x4-alone.profile.json") == \
        "vgg11-h512-b8-h200x4-alone-sample150-seed5.sweep.json"
    assert _match("vgg11-h512-b8-h200x4.profile.json") == \
        "vgg11-h512-b8-h200x4-sample150-seed5.sweep.json"
    # two samples of one machine: the larger one
    assert _match("vgg11-cpu4.profile.json") == "vgg11-cpu4-sample300.sweep.json"


def test_no_sweep_when_none_can_be_compared():
    profile = _load("vgg11-b8-never-cpu4-press.profile.json")
    assert all(mismatch(profile, _load(n)) for n in SWEEPS)
    assert _match("vgg11-b8-never-cpu4-press.profile.json") is None
    assert matching(profile, []) is None
