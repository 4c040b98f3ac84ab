"""``megatron[:FLAGS]``: Megatron-LM's even split of transformer blocks, a baseline.

Megatron-LM (NVIDIA/Megatron-LM, megatron/core/transformer/transformer_block.py,
``get_num_layers_to_build``, read at d98e8a6, 2026-08-22) gives every pipeline rank
``num_layers / pipeline_model_parallel_size`` transformer layers, asserting that it
divides; the embedding lives on the first rank and the output layer and loss on the last.
Two flags of ``TransformerConfig`` (megatron/core/transformer/transformer_config.py) count
them as layers: with ``account_for_embedding_in_pipeline_split`` ("the embedding layer will
be treated as a standard transformer layer in the context of partition and placement") the
count is ``num_layers + 1`` and the first rank builds one block fewer; with
``account_for_loss_in_pipeline_split`` likewise for the loss on the last rank. Both default
to False.

``megatron`` is the default configuration; ``megatron:embedding,loss`` (or ``embedding``,
``loss``, ``none``) sets the flags. A count the stages do not divide is refused as Megatron
refuses it, naming the values (its uneven ``num_layers_in_first/last_pipeline_stage`` are
hand-tuned counts, not a rule). mCAP's layers map onto Megatron's through
``mcap.core.blocks``: the layers in front of the repeated block are the embedding, those
behind it the final norm and output layer.
"""
from __future__ import annotations

from mcap.core.blocks import balance_from_blocks, repeated_blocks
from mcap.core.errors import McapError
from mcap.core.search.base import Found, Method, register

FLAGS = ("embedding", "loss")


def megatron_blocks(blocks: int, stages: int, embedding: bool = False, loss: bool = False) -> list[int]:
    """Blocks per pipeline rank by Megatron-LM's rule (module docstring)."""
    count = blocks + int(embedding) + int(loss)
    if count % stages:
        flags = "".join(f" + 1 ({f})" for f, on in zip(FLAGS, (embedding, loss)) if on)
        raise McapError(f"Megatron-LM needs num_layers={blocks}{flags} = {count} divisible by "
                        f"the {stages} pipeline stages (get_num_layers_to_build); this split "
                        f"does not exist for {stages} stages")
    per = count // stages
    out = [per] * stages
    out[0] -= int(embedding)
    out[-1] -= int(loss)
    if min(out) < 0:
        raise McapError(f"Megatron-LM: not enough layers in the first or last stage "
                        f"({count} layers over {stages} stages)")
    return out


def parse_flags(text: str) -> dict:
    words = [w.strip().lower() for w in str(text).split(",") if w.strip()]
    if words == ["none"]:
        words = []
    bad = [w for w in words if w not in FLAGS]
    if bad or len(set(words)) != len(words) or not str(text).strip():
        raise McapError(f"method megatron:FLAGS takes embedding, loss, embedding,loss or none "
                        f"(account_for_embedding/loss_in_pipeline_split); got {text!r}")
    return {"embedding": "embedding" in words, "loss": "loss" in words}


@register
class Megatron(Method):
    name = "megatron"
    label = "even blocks (Megatron-LM)"
    help = ("baseline: Megatron-LM's even split of transformer blocks (num_layers divisible by "
            "the stages); megatron:embedding,loss counts the embedding and the loss as a block "
            "each (account_for_embedding/loss_in_pipeline_split)")
    uses_costs = False
    partial = True
    argument = "FLAGS"
    color = "#8c564b"

    def parse_argument(self, text: str) -> dict:
        return parse_flags(text)

    def search(self, costs, stages, context, *, band=None, progress=None, embedding=False,
               loss=False, **options):
        blocks = repeated_blocks(context.layer_kinds, costs.num_layers, "megatron (Megatron-LM)")
        counts = megatron_blocks(blocks.count, stages, embedding, loss)
        who = "megatron" + (":" + ",".join(f for f, on in zip(FLAGS, (embedding, loss)) if on)
                            if embedding or loss else "")
        return Found(balance_from_blocks(blocks, counts, who), 1)
