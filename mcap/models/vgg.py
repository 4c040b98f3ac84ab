"""VGG11 flattened the way mCAP counts it (paper 4.2): 30 top-level layers.

features (21: conv/relu x8, maxpool x5), avgpool, flatten, classifier (7: linear, relu,
dropout, linear, relu, dropout, linear). Written here rather than taken from torchvision
so nothing is downloaded and the layer list is explicit.

ReLUs are out of place (torchvision's are in place): every layer may start a pipeline
stage, and a stage's first layer receives an activation that autograd and activation
checkpointing must keep intact (an in-place ReLU there fails the backward pass).
"""
from __future__ import annotations

from collections import OrderedDict

from torch import nn

from mcap.core.errors import McapError

# VGG "A" configuration: channels per conv, "M" for a 2x2 max-pool.
_CFG = (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M")


def vgg11(image_size: int, classes: int, hidden: int) -> nn.Sequential:
    if image_size < 32 or image_size % 32:
        raise McapError(f"vgg11: image_size must be a positive multiple of 32, got {image_size}")
    if classes < 1 or hidden < 1:
        raise McapError(f"vgg11: classes and hidden must be >= 1, got {classes} and {hidden}")
    layers: OrderedDict[str, nn.Module] = OrderedDict()
    in_ch, block, conv = 3, 1, 1
    for item in _CFG:
        if item == "M":
            layers[f"pool{block}"] = nn.MaxPool2d(2, 2)
            block, conv = block + 1, 1
            continue
        layers[f"conv{block}_{conv}"] = nn.Conv2d(in_ch, item, 3, padding=1)
        layers[f"relu{block}_{conv}"] = nn.ReLU(inplace=False)
        in_ch, conv = item, conv + 1
    # After five 2x2 pools the map is image_size/32; torchvision pools to 7x7, which is
    # exactly that at 224 (so 224/1000 gives the paper's 132.9M parameters), and small
    # images keep their own map instead of being upsampled to 7x7.
    side = image_size // 32
    layers["avgpool"] = nn.AdaptiveAvgPool2d((side, side))
    layers["flatten"] = nn.Flatten(1)
    layers["fc1"] = nn.Linear(512 * side * side, hidden)
    layers["relu_fc1"] = nn.ReLU(inplace=False)
    layers["drop1"] = nn.Dropout(0.5)
    layers["fc2"] = nn.Linear(hidden, hidden)
    layers["relu_fc2"] = nn.ReLU(inplace=False)
    layers["drop2"] = nn.Dropout(0.5)
    layers["fc3"] = nn.Linear(hidden, classes)
    return nn.Sequential(layers)
