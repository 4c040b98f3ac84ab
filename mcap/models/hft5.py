"""T5 (``hf:t5``) as mCAP layers: the encoder's sequence, then the decoder's (issue 29).

    embeddings | enc0 .. encN-1 | enc_norm | dec_embeddings | dec0 .. decM-1 | dec_norm | lm_head

An example is one LongTensor [batch, 2, seq]: the encoder's token ids and the decoder's
(what ``T5ForConditionalGeneration`` takes as ``input_ids`` and ``decoder_input_ids``), so a
pipeline's first stage receives one tensor. What later layers read travels with the hidden
states: the decoder's ids through the encoder, the encoder's output through the decoder
(every decoder block cross-attends to it), and the position biases the first block of each
stack computes and the others reuse, as ``T5Stack`` passes them. The shared embedding is one
weight in the three layers that use it (encoder and decoder embeddings, the tied head).
Attention is SDPA: T5's position bias is its additive mask, and with no padding transformers
makes no other mask (``create_causal_mask`` / ``create_bidirectional_mask`` return None).
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from mcap.core.errors import UnknownModel
from mcap.models.hflayers import Apply, Layer, _unpack
from mcap.models.limits import check_allocation


class Embeddings(Layer):
    def __init__(self, shared: nn.Embedding, dropout: nn.Module, source: str, kind: str, decoder: bool):
        super().__init__(kind, source)
        self.shared, self.dropout, self.decoder = shared, dropout, decoder

    def forward(self, *inputs):
        if self.decoder:  # (encoder output, decoder ids) -> (decoder states, encoder output)
            enc, ids = _unpack(inputs)
            return self.dropout(self.shared(ids)), enc
        ids = _unpack(inputs)[0]  # [batch, 2, seq]
        # what is carried is sent between stages, and a send takes contiguous tensors
        return self.dropout(self.shared(ids[:, 0])), ids[:, 1].contiguous()


class Block(Layer):
    """One T5Block. Encoder: (h, decoder ids[, bias]) -> (h, decoder ids, bias). Decoder:
    (h, encoder output[, bias, cross bias]) -> (h, encoder output, bias, cross bias)."""

    def __init__(self, block: nn.Module, source: str, decoder: bool):
        super().__init__(type(block).__name__, source)
        self.block, self.decoder = block, decoder

    def forward(self, *inputs):
        hidden, other, *biases = _unpack(inputs)
        bias = biases[0] if biases else None
        if self.decoder:
            cross = biases[1] if len(biases) > 1 else None
            h, bias, cross = self.block(hidden, None, bias, other, None, cross)
            return h, other, bias.contiguous(), cross.contiguous()
        h, bias, _ = self.block(hidden, None, bias)
        # the first block's bias is a permuted view (compute_bias); a send needs it contiguous
        return h, other, bias.contiguous()


class Norm(Layer):
    """A stack's final norm and dropout. Encoder: hand on (encoder output, decoder ids);
    decoder: the states the head reads, scaled by d_model**-0.5 when the head is tied
    (``scale_decoder_outputs``), as T5ForConditionalGeneration does."""

    def __init__(self, norm: nn.Module, dropout: nn.Module, source: str, decoder: bool, scale: float):
        super().__init__(type(norm).__name__, source)
        self.norm, self.dropout, self.decoder, self.scale = norm, dropout, decoder, scale

    def forward(self, *inputs):
        hidden, other, *_ = _unpack(inputs)
        out = self.dropout(self.norm(hidden))
        if self.decoder:
            return out * self.scale if self.scale != 1.0 else out
        return out, other


def t5_layout(model, config) -> list[tuple[str, nn.Module]]:
    if config._attn_implementation != "sdpa":
        raise UnknownModel("hf:t5: only attn_implementation=sdpa is laid out (T5's position bias "
                           "is its mask)")
    enc, dec = model.encoder, model.decoder
    out: list[tuple[str, nn.Module]] = [
        ("embeddings", Embeddings(model.shared, enc.dropout, "shared+encoder.dropout", "T5Embeddings", False))]
    out += [(f"enc{i}", Block(b, f"encoder.block.{i}", False)) for i, b in enumerate(enc.block)]
    out += [("enc_norm", Norm(enc.final_layer_norm, enc.dropout, "encoder.final_layer_norm", False, 1.0)),
            ("dec_embeddings", Embeddings(model.shared, dec.dropout, "shared+decoder.dropout",
                                          "T5Embeddings", True))]
    out += [(f"dec{i}", Block(b, f"decoder.block.{i}", True)) for i, b in enumerate(dec.block)]
    scale = config.d_model ** -0.5 if getattr(config, "scale_decoder_outputs", False) else 1.0
    out += [("dec_norm", Norm(dec.final_layer_norm, dec.dropout, "decoder.final_layer_norm", True, scale)),
            ("lm_head", Apply(model.lm_head, "lm_head", "LMHead"))]
    return out


def t5_batch(vocab: int, seq: int) -> Callable:
    def example_batch(batch_size: int, seed: int = 0):
        check_allocation(f"a batch of {batch_size} sequence pairs of {seq} tokens", 3 * 8 * batch_size * seq)
        g = torch.Generator()
        g.manual_seed(seed)
        ids = torch.randint(0, vocab, (batch_size, 2, seq), generator=g)
        return ids, torch.randint(0, vocab, (batch_size, seq), generator=g)
    return example_batch
