"""``--blocks M``: predict a profile's model with M repeated blocks (issue 41, item 3).

    python -m mcap predict   --profile llama-l5.profile.json --blocks 20 --balance 6,6,6,5
    python -m mcap recommend --profile llama-l5.profile.json --blocks 20 --stages 4
    python -m mcap evaluate  --profile llama-l5.profile.json --blocks 20 --sweep llama-l20.sweep.json

The profile's spec is rewritten with the block count (``mcap.models.spec.with_blocks``, pure:
the deep model is never built) and the profile deepened (``mcap.core.deepen``); every
predictor, search method and report then works on the deep model as on any profile.
"""
from __future__ import annotations

import sys

from mcap.cli import args as argtypes


def add_blocks_option(p) -> None:
    p.add_argument("--blocks", type=argtypes.positive_int, default=None, metavar="M",
                   help="predict the profile's model with M repeated blocks (e.g. 32 Llama "
                        "blocks from a profile of 4): each stage is read from the profile's "
                        "stages of the same kind (first, middle, last) and grown by its "
                        "increment per block; profile the shallow model with --scheme capture "
                        "so first, middle and last stages are measured at several depths")


def deepened(profile, blocks, like=None, for_target=None):
    """``profile`` deepened to ``blocks`` blocks (None: as it is), under the spec of ``like``
    (a ModelInfo: the sweep it is compared with) when its layers are the deep model's (one
    model spelled two ways, e.g. a family default written out), else the rewritten spec. A
    stage kind whose growth rests on predictions alone is said on stderr."""
    if blocks is None:
        return profile
    from mcap.core.errors import McapError
    if for_target:
        raise McapError(f"--blocks {blocks} with --for {for_target}: a deepened profile is "
                        "predicted on the device it was measured on; --for translates a "
                        "profile's own layers")
    from mcap.core import deepen
    from mcap.models.spec import with_blocks
    deep = deepen.deepen(profile, blocks, with_blocks(profile.model.spec, blocks))
    if like is not None and like.spec != deep.model.spec and like.layers == deep.model.layers:
        deep = deepen.deepen(profile, blocks, like.spec)
    for what in deepen.unmeasured(deep):
        print(f"mcap: note: the profile measured no {what} at two depths; their growth "
              f"past {deepen.shallow_blocks(deep.shallow).count} blocks rests on the "
              f"predictor (profile with --scheme capture to measure them)", file=sys.stderr)
    return deep


def refuse_with(args, *flags: str) -> None:
    """``--blocks`` predicts pipeline stages of the deep model; the hybrid plans and MPress
    paths read the profile as it is, so combining them is refused, naming the flag."""
    if getattr(args, "blocks", None) is None:
        return
    given = [f for f in flags if getattr(args, f.lstrip("-").replace("-", "_"), None) not in (None, False)]
    if given:
        from mcap.core.errors import McapError
        raise McapError(f"--blocks {args.blocks} predicts the pipeline stages of the deep model; "
                        f"it does not combine with {' or '.join(given)}")
