"""Ready-to-paste code for a chosen balance: torchgpipe's ``GPipe(model, balance=...)`` and
the ``torch.distributed.pipelining`` split points (a text "figure": pure, tested for equality)."""
from __future__ import annotations

from mcap.core.errors import InvalidPartitioning
from mcap.core.types import ModelInfo


def split_points(model: ModelInfo, balance: tuple[int, ...]) -> tuple[str, ...]:
    """Names of the layers that begin stages 1..G-1 (SplitPoint.BEGINNING goes there)."""
    if sum(balance) != model.num_layers:
        raise InvalidPartitioning(f"balance sums to {sum(balance)} but the model has "
                                  f"{model.num_layers} layers")
    names, start = [], 0
    for n in balance[:-1]:
        start += n
        names.append(model.layers[start].name)
    return tuple(names)


def gpipe_snippet(model: ModelInfo, balance: tuple[int, ...], chunks: int) -> str:
    split_points(model, balance)  # validates
    return (
        "from torchgpipe import GPipe\n\n"
        f"# model: nn.Sequential with the {model.num_layers} layers of {model.spec}\n"
        f"model = GPipe(model, balance={list(balance)}, chunks={chunks})\n"
    )


def pipelining_snippet(model: ModelInfo, balance: tuple[int, ...], chunks: int) -> str:
    points = split_points(model, balance)
    spec = ",\n".join(f"    {name!r}: SplitPoint.BEGINNING" for name in points)
    return (
        "from torch.distributed.pipelining import SplitPoint, pipeline, ScheduleGPipe\n\n"
        f"# model: nn.Sequential with the {model.num_layers} layers of {model.spec}\n"
        f"split_spec = {{\n{spec},\n}}\n"
        "pipe = pipeline(model, mb_args=(example_microbatch,), split_spec=split_spec)\n"
        "stage = pipe.build_stage(rank, device)\n"
        f"schedule = ScheduleGPipe(stage, n_microbatches={chunks}, loss_fn=loss_fn)\n"
    )
