"""Today's splits of LLMs as registered methods (issue 41): DeepSpeed's uniform, parameters
and type:REGEX, torchtitan's and Megatron-LM's even split of blocks, each by its own rule."""
import pytest

from mcap.core.blocks import find_blocks
from mcap.core.errors import McapError
from mcap.core.recommend import recommend
from mcap.core.search import choose, get, names
from mcap.core.search.megatron import megatron_blocks
from mcap.core.search.params import balance_of, partition_balanced
from mcap.core.search.titan import titan_blocks
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile, Setup


def llm_profile(blocks=8, kind="LlamaDecoderLayer", stages=4):
    """embeddings | blocks | norm | head, with the bundled Llama set's parameter bytes."""
    layers = ((Layer("embeddings", 32_768_000, "TokenEmbeddings"),)
              + tuple(Layer(f"block{i}", 2_902_016, kind) for i in range(blocks))
              + (Layer("norm", 1024, "LlamaRMSNorm"), Layer("lm_head", 32_768_000, "LMHead")))
    L = len(layers)
    stats = LayerStats(tuple(10_000 + i for i in range(L)), (None,) + (100,) * (L - 1))
    return Profile(ModelInfo("hf:llama:num_hidden_layers=%d" % blocks, layers), Setup(stages=stages), stats)


# --- DeepSpeed ------------------------------------------------------------------------------

@pytest.mark.parametrize("weights,parts,bounds", [
    # DeepSpeed's own tests/unit/runtime/utils/test_partition.py (microsoft/DeepSpeed 38327e0)
    ([0, 1, 2, 3, 3, 3], 4, [0, 3, 4, 5, 6]),             # test_int_balanced
    ([0, 11, 19, 30, 30, 30], 4, [0, 3, 4, 5, 6]),         # test_float_balanced, x10
    ([0, 11, 300, 30], 3, [0, 2, 3, 4]),                  # test_float_midheavy, x10
    ([1] * 8, 4, [0, 2, 4, 6, 8]),                        # test_easy_balance_balanced
    ([1, 1], 4, [0, 1, 2, 2, 2]),                          # test_short_partition: uniform
])
def test_partition_balanced_matches_deepspeeds_tests(weights, parts, bounds):
    assert partition_balanced(weights, parts) == bounds


@pytest.mark.parametrize("weights,parts,spread", [
    # DeepSpeed's tests/unit/utils/test_partition_balanced.py: max - min of the parts
    ([1, 2, 1], 4, 2), ([1, 1, 1, 1], 4, 0), ([1, 1, 1, 1, 1], 4, 1), ([1, 1, 1, 1, 0, 1], 4, 1)])
def test_partition_balanced_spread_matches_deepspeeds_tests(weights, parts, spread):
    b = partition_balanced(weights, parts)
    sums = [sum(weights[x:y]) for x, y in zip(b[:-1], b[1:])]
    assert max(sums) - min(sums) == spread


def test_params_minimises_the_spread_not_the_heaviest_stage():
    # [1, 9, 5, 3] over 3: loads 10 | 5 | 3 (spread 7) beat 1 | 9 | 8 (spread 8), although
    # the heaviest stage is 10 against 9: DeepSpeed balances the spread since v0.12.5
    w = [1, 9, 5, 3]
    rec = recommend(LayerStats((1,) * 4, (None, 1, 1, 1)), 3, "params", layer_params=w)
    assert rec.balance == (2, 1, 1)
    # the BERT-large weights of DeepSpeed's test_balance_bert: embedding and head each alone
    bert = [52559872] + [12596224] * 24 + [0, 52559872]
    assert balance_of(partition_balanced(bert, 8)) == (1, 4, 4, 4, 4, 4, 5, 1)


def test_params_ignores_the_scale_of_the_weights():
    w = [7, 3, 9, 2, 8, 8, 1, 5]
    assert partition_balanced(w, 3) == partition_balanced([4 * x for x in w], 3)


def test_uniform_is_deepspeeds_partition_uniform():
    # partition_uniform: boundaries k * (L // G), each of the first L % G stages one more
    for L, G in [(10, 4), (30, 4), (7, 7), (19, 8)]:
        q, r = divmod(L, G)
        bounds = [p * q + min(p, r) for p in range(G + 1)]
        rec = recommend(LayerStats((1,) * L, (None,) + (1,) * (L - 1)), G, "uniform")
        assert rec.balance == balance_of(bounds)


def test_type_splits_the_matching_layers_evenly():
    p = llm_profile(blocks=8)
    rec = recommend(p, 4, "type:decoderlayer")  # case-insensitive search, as DeepSpeed's
    blocks = [sum(1 for l in p.model.layers[a:a + n] if l.kind == "LlamaDecoderLayer")
              for a, n in zip((0, *_cum(rec.balance)[:-1]), rec.balance)]
    assert blocks == [2, 2, 2, 2]
    assert recommend(p, 4, "type").balance == rec.balance  # default: the repeated block
    assert rec.method == "type:decoderlayer"


def test_type_pattern_that_matches_nothing_lists_the_class_names():
    with pytest.raises(McapError, match="matches no layer: the layer class names are "
                                        "TokenEmbeddings, LlamaDecoderLayer, LlamaRMSNorm, LMHead"):
        recommend(llm_profile(), 4, "type:GPT2Block")


def test_type_reads_the_pattern_as_deepspeed_does():
    method, options = choose("type:ParallelTransformerLayerPipe:x")
    assert method.name == "type" and options == {"pattern": "paralleltransformerlayerpipe"}
    with pytest.raises(McapError, match="not a regular expression"):
        choose("type:(")


# --- torchtitan and Megatron-LM --------------------------------------------------------------

def test_titan_follows_first_and_last_stage_less_layers():
    # 32 blocks + 1 + 1 = 34 over 8: 4 each, the first two 5; first and last one block fewer
    assert titan_blocks(32, 8) == [4, 5, 4, 4, 4, 4, 4, 3]
    assert titan_blocks(32, 8, 0, 0) == [4, 4, 4, 4, 4, 4, 4, 4]
    assert titan_blocks(3, 2, 2, 2) == [2, 1]  # torchtitan's docstring example (2, 3, 2, 2)
    assert titan_blocks(5, 1) == [5]
    with pytest.raises(McapError, match="first_stage_less_layers=3 exceeds the 2 layers per stage"):
        titan_blocks(4, 3, 3, 0)
    p = llm_profile(blocks=32, stages=8)
    rec = recommend(p, 8, "titan")
    assert rec.balance == (1 + 4, 5, 4, 4, 4, 4, 4, 3 + 2)  # embeddings first, norm+head last
    assert recommend(p, 8, "titan:0,0").balance == (5, 4, 4, 4, 4, 4, 4, 6)


def test_megatron_needs_the_stages_to_divide_the_blocks():
    assert megatron_blocks(8, 4) == [2, 2, 2, 2]
    assert megatron_blocks(30, 4, embedding=True, loss=True) == [7, 8, 8, 7]
    assert recommend(llm_profile(8), 4, "megatron").balance == (3, 2, 2, 4)
    assert recommend(llm_profile(30), 4, "megatron:embedding,loss").balance == (8, 8, 8, 9)
    with pytest.raises(McapError, match=r"num_layers=8 \+ 1 \(embedding\) \+ 1 \(loss\) = 10 divisible by the 4"):
        recommend(llm_profile(8), 4, "megatron:embedding,loss")
    with pytest.raises(McapError, match="takes embedding, loss"):
        choose("megatron:embeddings")


def test_megatron_with_both_flags_is_titans_split_where_it_exists():
    for blocks, stages in [(30, 4), (14, 4), (62, 8), (6, 2)]:
        assert megatron_blocks(blocks, stages, True, True) == titan_blocks(blocks, stages)


def test_blocks_are_the_longest_run_of_one_kind():
    p = llm_profile(blocks=5)
    b = find_blocks([l.kind for l in p.model.layers], p.model.num_layers)
    assert (b.first, b.count, b.before, b.after, b.kind) == (1, 5, 1, 2, "LlamaDecoderLayer")
    kindless = find_blocks(None, 6)
    assert (kindless.first, kindless.count) == (1, 4)  # input, blocks, output


# --- the registry's arguments ----------------------------------------------------------------

def test_a_method_without_an_argument_refuses_one():
    with pytest.raises(McapError, match="method 'exact' takes no argument .* type\\[:REGEX\\]"):
        choose("exact:3")
    with pytest.raises(McapError, match="unknown method 'deepspeed'"):
        choose("deepspeed:x")


def test_every_baseline_is_compared_where_methods_are():
    baselines = names(uses_costs=False)
    assert {"uniform", "params", "type", "titan", "megatron"} <= set(baselines)
    from mcap.core.scaling import partitioners
    assert set(baselines) <= set(partitioners())
    assert all(get(m).partial for m in ("titan", "megatron"))


def _cum(balance):
    out, at = [], 0
    for n in balance:
        at += n
        out.append(at)
    return out


def test_evaluate_reports_a_rule_that_does_not_exist_instead_of_failing():
    from mcap.core.evaluate import evaluate, pure_picks
    from mcap.core.types import Run, Sweep
    p = llm_profile(blocks=8)
    refused = []
    picks = pure_picks(p, 4, methods=("exact", "megatron:embedding,loss", "titan"), refused=refused)
    assert [r.method for r in picks] == ["exact", "titan"]
    assert refused and refused[0][0] == "megatron:embedding,loss" and "= 10 divisible" in refused[0][1]
    with pytest.raises(McapError, match="divisible"):  # without the list: raised, as before
        pure_picks(p, 4, methods=("megatron:embedding,loss",))
    runs = tuple(Run(r.balance, "ok", r.predicted_peaks, 1.0) for r in picks)
    ev = evaluate(p, Sweep(p.model, p.setup, runs), picks, unavailable=refused)
    assert {m.method: m.note for m in ev.picks}["megatron:embedding,loss"].startswith("refused:")
