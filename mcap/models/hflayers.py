"""The base of the Hugging Face layers mCAP sees (``mcap.models.hf``, ``mcap.models.hft5``):
one ``Layer`` per mCAP layer, the packing of the hidden states with what later layers need,
and ``Apply`` (a module on the hidden states alone). Shared by both, importing neither."""
from __future__ import annotations

from torch import nn


class Layer(nn.Module):
    """One mCAP layer. Its input and output are the hidden states, followed by what later
    layers need (``carry``: names of the tensors after the hidden states)."""

    mcap_kind = ""
    mcap_source = ""

    def __init__(self, kind: str, source: str):
        super().__init__()
        self.mcap_kind, self.mcap_source = kind, source


def _pack(hidden, extras: tuple):
    return (hidden, *extras) if extras else hidden


def _unpack(inputs: tuple) -> tuple:
    """nn.Sequential passes a tuple as one argument, a pipeline stage as several."""
    if len(inputs) == 1 and isinstance(inputs[0], tuple):
        return inputs[0]
    return inputs


class Apply(Layer):
    """A module applied to the hidden states alone (a final norm, a head, a pooler); what the
    blocks carried ends here. ``first_token``: a classifier on the [CLS] position (ViT)."""

    def __init__(self, module: nn.Module, source: str, kind: str = "", first_token: bool = False):
        super().__init__(kind or type(module).__name__, source)
        self.module_, self.first_token = module, first_token

    def forward(self, *inputs):
        hidden = _unpack(inputs)[0]
        if self.first_token:
            hidden = hidden[:, 0, :]
        return self.module_(hidden)
