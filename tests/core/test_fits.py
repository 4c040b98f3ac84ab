"""A model one of whose layers no device can hold is refused before anything is built
(issue 41, bad input): the layer's bytes and the device's memory named, exit 2."""
import pytest

from mcap.cli.main import main
from mcap.core.fits import LayerTooLarge, check_layers_fit, layer_needs
from mcap.core.types import Layer, ModelInfo

INFO = ModelInfo("toy", (Layer("embeddings", 1000, "TokenEmbeddings"), Layer("block0", 300, "Block"),
                         Layer("lm_head", 1000, "LMHead")))


def test_a_layer_needs_its_weights_gradients_and_optimizer_state():
    assert [n.need for n in layer_needs(INFO, "sgd")] == [3000, 900, 3000]  # momentum: 1 copy
    assert [n.need for n in layer_needs(INFO, "adam")] == [4000, 1200, 4000]  # two moments
    check_layers_fit(INFO, 3000, "a device")  # exactly fits: nothing said
    with pytest.raises(LayerTooLarge, match=r"layer 0 'embeddings' \(TokenEmbeddings\) has 1,000 bytes of "
                                            r"parameters .* at least 4,000 bytes .* more than the 3,999 bytes"):
        check_layers_fit(INFO, 3999, "a device", "adam")


def test_the_cli_refuses_a_layer_no_device_holds_before_building_anything(capsys, tmp_path):
    # GPT-2 with a 2,000,000-token vocabulary: its embedding is 512 MB at width 64 (1.5 GB
    # with gradients and momentum); a 1 GiB device holds no stage with it. Refused from the
    # meta device's sizes, before any stage process starts.
    spec = "hf:gpt2:n_layer=2,n_embd=64,n_head=4,seq=32,vocab_size=2000000"
    store = tmp_path / "s.sqlite"
    for argv in (["measure", "--model", spec, "--balance", "1,4"],
                 ["sweep", "--model", spec, "--stages", "2", "--out", str(tmp_path / "x.sweep.json")],
                 ["profile", "--model", spec, "--stages", "2", "--out", str(tmp_path / "x.profile.json")]):
        code = main([*argv, "--capacity", "1GiB", "--store", str(store)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "layer 0 'embeddings' (GPT2Embeddings) has 512,262,144 bytes of parameters" in err
        assert "1,536,786,432 bytes" in err and "1,073,741,824 bytes (1.00 GiB)" in err
        assert "Traceback" not in err
