"""``titan[:FIRST,LAST]``: torchtitan's even split of transformer blocks, a baseline.

torchtitan (pytorch/torchtitan, torchtitan/distributed/pipeline_parallel.py,
``_generate_llm_fqn_per_model_part``, read at b5bcd76, 2026-08-21) splits an LLM's blocks
over pipeline stages counting the input modules (``tok_embeddings``) as ``input_weight``
blocks and the output modules (``norm`` + ``output``) as ``output_weight`` blocks, from the
config keys ``parallelism.pipeline_parallel_first_stage_less_layers`` and
``..._last_stage_less_layers`` (torchtitan/config/configs.py, both default 1: "the first
stage has the extra overhead of the embedding layer"):

* ``effective = blocks + input_weight + output_weight``; ``per = effective // stages``,
  ``extra = effective % stages``; stage ``s`` counts ``per + (1 if s < extra else 0)``;
* the first stage takes that count minus ``input_weight`` blocks and the embedding, the last
  that count minus ``output_weight`` blocks and the norm and head, a middle stage that count;
* refused (torchtitan's ValueError) when ``stages > effective``, ``per == 0``, or a weight
  exceeds ``per``; one stage holds everything.

Megatron-LM's ``account_for_embedding_in_pipeline_split`` and
``account_for_loss_in_pipeline_split`` together are the same split whenever Megatron
accepts it (``megatron:embedding,loss``, ``mcap.core.search.megatron``). mCAP's layers map
onto torchtitan's modules through ``mcap.core.blocks``: the layers in front of the repeated
block are ``tok_embeddings``, those behind it ``norm`` and ``output``.
"""
from __future__ import annotations

from mcap.core.blocks import balance_from_blocks, repeated_blocks
from mcap.core.errors import McapError
from mcap.core.search.base import Found, Method, register

DEFAULT_LESS = (1, 1)  # torchtitan's first/last_stage_less_layers defaults


def titan_blocks(blocks: int, stages: int, first_less: int = 1, last_less: int = 1) -> list[int]:
    """Blocks per stage by torchtitan's rule (module docstring); McapError with its reason."""
    if stages == 1:
        return [blocks]
    effective = blocks + first_less + last_less
    where = (f"torchtitan's split of {blocks} blocks + first_stage_less_layers={first_less} + "
             f"last_stage_less_layers={last_less} over {stages} stages")
    if stages > effective:
        raise McapError(f"{where}: more stages than the {effective} effective layers")
    per, extra = divmod(effective, stages)
    for name, weight in (("first", first_less), ("last", last_less)):
        if weight > per:
            raise McapError(f"{where}: {name}_stage_less_layers={weight} exceeds the {per} "
                            f"layers per stage")
    counts = [per + (1 if s < extra else 0) for s in range(stages)]
    counts[0] -= first_less
    counts[-1] -= last_less
    return counts


def parse_less(text: str) -> tuple[int, int]:
    parts = str(text).split(",")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        values = ()
    if len(values) != 2 or min(values) < 0 or max(values) > 1000:
        raise McapError(f"method titan:FIRST,LAST takes first_stage_less_layers and "
                        f"last_stage_less_layers, two integers from 0 to 1000 such as 1,1; "
                        f"got {text!r}")
    return values


@register
class Titan(Method):
    name = "titan"
    label = "even blocks (torchtitan)"
    help = ("baseline: torchtitan's even split of transformer blocks, the embedding and the "
            "norm+head each counted as one block (first/last_stage_less_layers 1,1; "
            "titan:FIRST,LAST to change)")
    uses_costs = False
    partial = True
    argument = "FIRST,LAST"
    color = "#e377c2"

    def parse_argument(self, text: str) -> dict:
        return {"less": parse_less(text)}

    def search(self, costs, stages, context, *, band=None, progress=None, less=DEFAULT_LESS,
               **options):
        blocks = repeated_blocks(context.layer_kinds, costs.num_layers, "titan (torchtitan)")
        counts = titan_blocks(blocks.count, stages, *less)
        return Found(balance_from_blocks(blocks, counts, f"titan:{less[0]},{less[1]}"), 1)
