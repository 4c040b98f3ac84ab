"""AmoebaNet-D(L, F) (paper 4.3), following the design of torchgpipe's benchmark model
(stem, two stem reduction cells, three groups of L/3 normal cells separated by reduction
cells, classifier). L+6 top-level layers.

Cells pass (state, previous state) tuples between layers, as in torchgpipe; ``forward``
also accepts the two states as separate arguments, which is how a pipeline stage that
receives a tuple calls its first layer.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

import torch
from torch import nn

from mcap.core.errors import McapError


def _relu_conv_bn(cin: int, cout: int, kernel=1, stride=1, padding=0) -> nn.Sequential:
    return nn.Sequential(nn.ReLU(inplace=False),
                         nn.Conv2d(cin, cout, kernel, stride, padding, bias=False),
                         nn.BatchNorm2d(cout))


class FactorizedReduce(nn.Module):
    """Halves the map with two offset stride-2 1x1 convs (NASNet's trick)."""

    def __init__(self, cin: int, cout: int):
        super().__init__()
        self.relu = nn.ReLU(inplace=False)
        self.pad = nn.ZeroPad2d((0, 1, 0, 1))
        self.conv1 = nn.Conv2d(cin, cout // 2, 1, stride=2, bias=False)
        self.conv2 = nn.Conv2d(cin, cout - cout // 2, 1, stride=2, bias=False)
        self.bn = nn.BatchNorm2d(cout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(x)
        return self.bn(torch.cat([self.conv1(x), self.conv2(self.pad(x[:, :, 1:, 1:]))], dim=1))


# Cell operations: (channels, stride) -> module.
def _none(c: int, s: int) -> nn.Module:
    return nn.Identity() if s == 1 else FactorizedReduce(c, c)


def _avg3(c: int, s: int) -> nn.Module:
    return nn.AvgPool2d(3, stride=s, padding=1, count_include_pad=False)


def _max3(c: int, s: int) -> nn.Module:
    return nn.MaxPool2d(3, stride=s, padding=1)


def _max2(c: int, s: int) -> nn.Module:
    return nn.MaxPool2d(2, stride=s)


def _conv1(c: int, s: int) -> nn.Module:
    return _relu_conv_bn(c, c, 1, s)


def _conv3(c: int, s: int) -> nn.Module:
    q = max(c // 4, 1)
    return nn.Sequential(*_relu_conv_bn(c, q), *_relu_conv_bn(q, q, 3, s, 1), *_relu_conv_bn(q, c))


def _conv17_71(c: int, s: int) -> nn.Module:
    q = max(c // 4, 1)
    return nn.Sequential(*_relu_conv_bn(c, q),
                         *_relu_conv_bn(q, q, (1, 7), (1, s), (0, 3)),
                         *_relu_conv_bn(q, q, (7, 1), (s, 1), (3, 0)),
                         *_relu_conv_bn(q, c))


Op = Callable[[int, int], nn.Module]
# AmoebaNet-D genotype as used by torchgpipe's benchmark (which reproduces GPipe's
# parameter counts): pairs of (input state index, operation); each two ops are summed
# into a new state; the listed states are concatenated as the cell's output.
_NORMAL: tuple[tuple[int, Op], ...] = (
    (1, _conv1), (1, _max3), (1, _none), (0, _conv17_71), (0, _conv1),
    (0, _conv17_71), (2, _max3), (2, _none), (1, _avg3), (5, _conv1))
_NORMAL_CONCAT = (0, 3, 4, 6)
_REDUCTION: tuple[tuple[int, Op], ...] = (
    (0, _max2), (0, _max3), (2, _none), (1, _conv3), (2, _conv17_71),
    (2, _max3), (3, _none), (1, _max2), (2, _avg3), (3, _conv1))
_REDUCTION_CONCAT = (4, 5, 6)


def _states(inputs: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    if len(inputs) == 1 and isinstance(inputs[0], (tuple, list)):
        inputs = tuple(inputs[0])
    if len(inputs) == 1:
        return inputs[0], inputs[0]
    return inputs[0], inputs[1]


class Stem(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.relu = nn.ReLU(inplace=False)
        self.conv = nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(self.relu(x)))


class Cell(nn.Module):
    def __init__(self, c_prev_prev: int, c_prev: int, c: int, reduction: bool, reduction_prev: bool):
        super().__init__()
        self.reduce1 = _relu_conv_bn(c_prev, c)
        if reduction_prev:
            self.reduce2: nn.Module = FactorizedReduce(c_prev_prev, c)
        elif c_prev_prev != c:
            self.reduce2 = _relu_conv_bn(c_prev_prev, c)
        else:
            self.reduce2 = nn.Identity()
        genotype = _REDUCTION if reduction else _NORMAL
        self.concat = _REDUCTION_CONCAT if reduction else _NORMAL_CONCAT
        self.indices = tuple(i for i, _ in genotype)
        self.ops = nn.ModuleList(op(c, 2 if reduction and i < 2 else 1) for i, op in genotype)

    def forward(self, *inputs) -> tuple[torch.Tensor, torch.Tensor]:
        s1, s2 = _states(inputs)
        skip = s1
        states = [self.reduce1(s1), self.reduce2(s2)]
        for k in range(0, len(self.ops), 2):
            states.append(self.ops[k](states[self.indices[k]])
                          + self.ops[k + 1](states[self.indices[k + 1]]))
        return torch.cat([states[i] for i in self.concat], dim=1), skip


class Classify(nn.Module):
    def __init__(self, channels: int, classes: int):
        super().__init__()
        self.pool = nn.AdaptiveAvgPool2d(1)  # = torchgpipe's AvgPool2d(7) at 224x224
        self.flat = nn.Flatten(1)
        self.fc = nn.Linear(channels, classes)

    def forward(self, *inputs) -> torch.Tensor:
        x, _ = _states(inputs)
        return self.fc(self.flat(self.pool(x)))


def amoebanet_d(layers: int, filters: int, image_size: int, classes: int) -> nn.Sequential:
    if layers < 3 or layers % 3:
        raise McapError(f"amoebanet-d: layers must be a positive multiple of 3, got {layers}")
    if filters < 4 or filters % 4:
        raise McapError(f"amoebanet-d: filters must be a positive multiple of 4, got {filters}")
    if image_size < 32 or image_size % 32:
        raise McapError(f"amoebanet-d: image_size must be a positive multiple of 32, got {image_size}")
    c = filters // 4
    c_pp = c_p = c
    red_prev = False
    mods: OrderedDict[str, nn.Module] = OrderedDict()

    def cell(reduction: bool) -> Cell:
        nonlocal c, c_pp, c_p, red_prev
        made = Cell(c_pp, c_p, c, reduction, red_prev)
        c_pp, c_p, red_prev = c_p, c * len(made.concat), reduction
        return made

    def reduction() -> Cell:
        nonlocal c
        c *= 2
        return cell(True)

    mods["stem1"] = Stem(c)
    mods["stem2"] = reduction()
    mods["stem3"] = reduction()
    for group in (1, 3, 5):
        if group > 1:
            mods[f"cell{group - 1}_reduction"] = reduction()
        for i in range(layers // 3):
            mods[f"cell{group}_normal{i + 1}"] = cell(False)
    mods["classify"] = Classify(c_p, classes)
    return nn.Sequential(mods)
