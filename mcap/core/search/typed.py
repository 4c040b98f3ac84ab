"""``type[:REGEX]``: DeepSpeed's ``partition_method="type:REGEX"``, a baseline.

DeepSpeed's ``PipelineModule._partition_layers`` (deepspeed/runtime/pipe/module.py, read at
microsoft/DeepSpeed 38327e0) lower-cases the method, takes the text between the first and
the second colon as a regular expression (``method.split(':')[1]``), gives weight 1 to every
layer whose class name it ``search``-es with ``IGNORECASE`` (``_find_layer_type``) and 0 to
the others, and splits those binary weights with ``partition_balanced``: an equal count of
matching layers per stage, the others wherever that DP's tie-break puts them
(``mcap.core.search.params``). No matching layer: DeepSpeed raises "Partitioning '...' found
no valid layers to partition"; here McapError (the CLI's exit 2) listing the layer class
names there are.

mCAP's layer class name is ``Layer.kind`` (a wrapper's ``mcap_kind``: ``GPT2Block``,
``LlamaDecoderLayer``). Without an argument (every page, ``evaluate``) the pattern is the
model's repeated block kind, matched whole (``mcap.core.blocks``): DeepSpeed users write
``type:transformer`` or ``type:ParallelTransformerLayerPipe`` for the same thing.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence

from mcap.core.blocks import repeated_blocks
from mcap.core.errors import McapError
from mcap.core.search.base import Found, Method, register
from mcap.core.search.params import balance_of, partition_balanced
from mcap.core.search.uniform import uniform

MAX_PATTERN = 200


def pattern_of(text: str) -> str:
    """The regular expression DeepSpeed reads from ``type:text`` (lower-cased, up to the
    next colon), checked to compile; McapError naming it otherwise."""
    pattern = str(text).lower().split(":")[0]
    if not pattern or len(pattern) > MAX_PATTERN:
        raise McapError(f"method type:REGEX needs a pattern of 1 to {MAX_PATTERN} characters, "
                        f"got {text!r}")
    try:
        re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        raise McapError(f"method type:{text}: {pattern!r} is not a regular expression ({exc})") from None
    return pattern


def matching(kinds: Optional[Sequence[str]], L: int, pattern: Optional[str]) -> list[int]:
    """1 for each layer the pattern matches (the repeated block without one), else 0."""
    if pattern is None:
        blocks = repeated_blocks(kinds, L, "type without a pattern (e.g. type:Conv2d)")
        return [1 if blocks.first <= i < blocks.end else 0 for i in range(L)]
    if not kinds or not any(kinds):
        raise McapError(f"method type:{pattern} matches layer class names, and this profile "
                        "records none (written before layer kinds were kept); profile the "
                        "model again, or use type without a pattern")
    rx = re.compile(pattern, re.IGNORECASE)
    weights = [1 if rx.search(k or "") else 0 for k in kinds]
    if not any(weights):
        names = ", ".join(dict.fromkeys(k for k in kinds if k))
        raise McapError(f"method type:{pattern} matches no layer: the layer class names are "
                        f"{names}")
    return weights


@register
class TypeRegex(Method):
    name = "type"
    label = "balanced by layer type (DeepSpeed)"
    help = ("baseline: DeepSpeed's partition_method 'type:REGEX', an equal count of the layers "
            "whose class name matches per stage (default: the repeated block, e.g. "
            "type:LlamaDecoderLayer)")
    uses_costs = False
    partial = True  # without a pattern, on a model with no repeated block
    argument = "REGEX"
    color = "#bcbd22"

    def parse_argument(self, text: str) -> dict:
        return {"pattern": pattern_of(text)}

    def search(self, costs, stages, context, *, band=None, progress=None, pattern=None, **options):
        L = costs.num_layers
        kinds = context.layer_kinds
        if kinds is not None and len(kinds) != L:
            raise McapError(f"method type got layer kinds for {len(kinds)} layers but the "
                            f"statistics have {L}")
        weights = matching(kinds, L, pattern)
        if stages >= L:
            return Found(uniform(L, stages), 1)
        return Found(balance_of(partition_balanced(weights, stages)), stages * L)
