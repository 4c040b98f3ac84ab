"""Where a model's repeated block sits among its layers (issue 41). Pure: no torch, no files.

An LLM laid out as mCAP layers is ``input layers | N identical blocks | output layers``
(``hf:llama``: embeddings, ``LlamaDecoderLayer`` x N, norm, lm_head). Today's splits
(torchtitan's and Megatron-LM's even split of transformer blocks, DeepSpeed's
``type:REGEX``; ``mcap.core.search``) and the deep-from-shallow prediction
(``mcap.core.deepen``) both need to know which layers are the blocks:

* with layer kinds (``Layer.kind``, the class name a wrapper names): the longest run of
  consecutive layers of one kind (and, when given, equal parameter bytes), the first such
  run on a tie;
* without kinds (a file written before kinds were recorded, bare statistics): every layer
  but the first and the last, the LLM shape (input, blocks, output).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from mcap.core.errors import McapError


@dataclass(frozen=True)
class Blocks:
    """Layers ``first .. first + count - 1`` are the repeated block (``kind`` "" when the
    layers record no kinds); ``total`` is the model's layer count."""
    first: int
    count: int
    total: int
    kind: str = ""

    @property
    def end(self) -> int:
        """One past the last block."""
        return self.first + self.count

    @property
    def before(self) -> int:
        """Layers in front of the blocks (the embedding)."""
        return self.first

    @property
    def after(self) -> int:
        """Layers behind the blocks (final norm, head)."""
        return self.total - self.end


def find_blocks(kinds: Optional[Sequence[str]], num_layers: int,
                params: Optional[Sequence[int]] = None) -> Blocks:
    """The repeated block of a model of ``num_layers`` layers (module docstring)."""
    if num_layers < 1:
        raise McapError(f"a model needs at least one layer, got {num_layers}")
    if not kinds or not any(kinds):
        if num_layers <= 2:
            return Blocks(0, num_layers, num_layers)
        return Blocks(1, num_layers - 2, num_layers)
    if len(kinds) != num_layers:
        raise McapError(f"{len(kinds)} layer kinds for a model of {num_layers} layers")
    same = (lambda i: kinds[i] == kinds[i - 1] and bool(kinds[i])
            and (params is None or params[i] == params[i - 1]))
    best_first, best_count, at = 0, 1, 0
    for i in range(1, num_layers + 1):
        if i == num_layers or not same(i):
            if i - at > best_count:
                best_first, best_count = at, i - at
            at = i
    return Blocks(best_first, best_count, num_layers, kinds[best_first])


def repeated_blocks(kinds: Optional[Sequence[str]], num_layers: int, who: str) -> Blocks:
    """:func:`find_blocks`, refused (McapError naming ``who``) when no kind repeats: a split
    of transformer blocks does not apply to a model without them (VGG11's layers are
    convolutions, activations and pools, none twice in a row)."""
    blocks = find_blocks(kinds, num_layers)
    if blocks.count < 2 and num_layers > 2:
        raise McapError(f"{who} splits a model's repeated blocks, and this model has none (no "
                        f"layer kind repeats in consecutive layers; the kinds are "
                        f"{', '.join(dict.fromkeys(k for k in kinds or () if k))})")
    return blocks


def balance_from_blocks(blocks: Blocks, per_stage: Sequence[int], who: str) -> tuple[int, ...]:
    """Blocks per stage -> layers per stage, the input layers on the first stage and the
    output layers on the last (where torchtitan and Megatron-LM place the embedding and
    the norm, head and loss). McapError naming ``who``'s counts when a stage would be
    empty (the layer counts mCAP runs have no empty stage)."""
    if sum(per_stage) != blocks.count or min(per_stage) < 0:
        raise McapError(f"{who}: {','.join(map(str, per_stage))} blocks per stage do not place "
                        f"the model's {blocks.count} blocks")
    out = list(per_stage)
    out[0] += blocks.before
    out[-1] += blocks.after
    empty = [i for i, n in enumerate(out) if n == 0]
    if empty:
        raise McapError(f"{who} leaves stage {empty[0]} without a layer ({','.join(map(str, per_stage))} "
                        f"of {blocks.count} blocks per stage); use fewer stages")
    return tuple(out)
