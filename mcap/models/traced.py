"""Any ``nn.Module`` as mCAP layers, split by the pipeline tracer (issue 29).

A user model that is not an ``nn.Sequential`` (blocks in a dict, a forward with a skip) is
split by ``torch.distributed.pipelining``'s tracer, the one ``pipeline()`` uses:
``SplitPoint.BEGINNING`` annotations on the modules that start a layer, ``torch.export``,
then ``Pipe._from_traced``, which cuts the exported graph into one ``GraphModule`` per
layer. ``pipeline()`` itself exports with every shape fixed; the same steps are taken here
with the batch dimension free, so one split serves every micro-batch size a run uses.

Which modules start a layer: the names the user gives (``split=``), else the module's
top-level children in the order they are registered, a ``ModuleList``/``ModuleDict`` counting
as its items (``blocks.0``, ``blocks.1``, ...).

The pieces become an ``nn.Sequential`` mCAP partitions like any other: layer k takes the
values alive before it (the model's input, or what earlier layers computed and a later one
still reads) and returns those alive after it. A value a later layer reads (a skip
connection) therefore passes through the stages in between, as in an ``nn.Sequential``
pipeline runtime without skip portals (torchgpipe's ``skip`` module sends it directly).
A shared parameter (a tied weight) is one ``Parameter`` in every layer that uses it: a
stage holding several of them holds one copy, stages apart hold one each (``mcap.models.hf``).

A model the tracer cannot capture (data-dependent control flow, an untraceable op) is
refused with the tracer's reason and the name of the innermost submodule it was in.
"""
from __future__ import annotations

import operator
from collections import OrderedDict
from typing import Callable, Optional, Sequence

import torch
from torch import nn

from mcap.core.errors import McapError

MAX_LAYERS = 4096


def default_split(module: nn.Module) -> list[str]:
    """Top-level children in registration order; a ModuleList/ModuleDict as its items."""
    names = []
    for name, child in module.named_children():
        if isinstance(child, (nn.ModuleList, nn.ModuleDict)):
            names += [f"{name}.{k}" for k, _ in child.named_children()]
        else:
            names.append(name)
    return names


class TracedLayer(nn.Module):
    """One piece of the traced graph, with the values it passes on."""

    def __init__(self, piece: nn.Module, takes: Sequence[int], calls: Sequence,
                 gives: Sequence[tuple], kind: str, source: str):
        super().__init__()
        self.piece = piece
        self.takes = tuple(takes)        # ids of the values arriving, in order
        self.calls = tuple(calls)        # the piece's arguments: value ids
        self.gives = tuple(gives)        # ("in", id) passed through, or ("out", index|None, id)
        self.mcap_kind, self.mcap_source = kind, source

    def forward(self, *inputs):
        if len(inputs) == 1 and isinstance(inputs[0], tuple):
            inputs = inputs[0]
        env = dict(zip(self.takes, inputs))
        out = self.piece(*(env[v] for v in self.calls))
        values = []
        for how, a, b in self.gives:
            if how == "in":
                values.append(env[a])
            else:  # a send takes contiguous tensors (a no-op for the usual ones)
                v = out if a is None else out[a]
                values.append(v.contiguous() if isinstance(v, torch.Tensor) else v)
        return values[0] if len(values) == 1 else tuple(values)


def split(module: nn.Module, example_inputs, names: Optional[Sequence[str]] = None,
          what: str = "model") -> nn.Sequential:
    """``module`` cut at the start of each named submodule into an ``nn.Sequential``."""
    from torch.distributed.pipelining import SplitPoint
    from torch.distributed.pipelining._IR import MultiUseParameterConfig, Pipe, annotate_split_points

    names = list(default_split(module) if names is None else names)
    known = dict(module.named_modules())
    missing = [n for n in names if n not in known or not n]
    if missing:
        raise McapError(f"{what}: no submodule named {', '.join(map(repr, missing))} to split at; "
                        f"it has {', '.join(n for n in known if n and '.' not in n)}")
    if len(set(names)) != len(names) or len(names) > MAX_LAYERS:
        raise McapError(f"{what}: split points must be distinct and at most {MAX_LAYERS}, got {len(names)}")
    if len(names) < 2:
        raise McapError(f"{what}: one layer only ({names}); a pipeline needs at least two "
                        f"(name the blocks to split at)")
    inputs = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    if not all(isinstance(x, torch.Tensor) for x in inputs):
        raise McapError(f"{what}: example_batch's inputs must be a tensor or a tuple of tensors")
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    inputs = tuple(x.to(device) for x in inputs)
    traced = module  # annotate_split_points wraps the named forwards in place; the module is ours
    annotate_split_points(traced, {n: SplitPoint.BEGINNING for n in names[1:]})
    batch = torch.export.Dim("batch", min=1)
    dynamic = tuple({0: batch} if x.dim() else None for x in inputs)
    try:
        with _quiet():
            ep = torch.export.export(traced, inputs, dynamic_shapes=dynamic)
            pipe = Pipe._from_traced(traced, ep, MultiUseParameterConfig.REPLICATE)
    except McapError:
        raise
    except Exception as exc:
        raise McapError(f"{what} cannot be split by the pipeline tracer: {_where(exc, module)}"
                        f"{type(exc).__name__}: {_reason(exc)}") from None
    return _sequential(pipe.split_gm, module, names, what)


def _where(exc: BaseException, module: nn.Module) -> str:
    """The innermost submodule of ``module`` whose forward the failure went through, and the
    innermost line of code outside torch there."""
    import os
    names = {id(m): n for n, m in module.named_modules()}
    found, line = None, None
    torch_dir = os.path.dirname(torch.__file__)
    seen = set()
    e: Optional[BaseException] = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            me = frame.f_locals.get("self")
            if me is not None and id(me) in names:
                found = names[id(me)]
                if not frame.f_code.co_filename.startswith(torch_dir):
                    line = f"{os.path.basename(frame.f_code.co_filename)}:{tb.tb_lineno}"
            tb = tb.tb_next
        e = e.__cause__ or e.__context__
    if found is None:
        return ""
    kind = type(dict(module.named_modules())[found]).__name__
    who = f"in layer {found!r} ({kind})" if found else f"in the model's own forward ({kind})"
    return f"{who}{', ' + line if line else ''}: "


class _quiet:
    """torch.export logs, and prints to stderr, the graph it could not finish; the refusal
    says why in one line instead."""
    NAMES = ("torch.fx.experimental.symbolic_shapes", "torch._dynamo", "torch.export",
             "torch._export", "torch.distributed.pipelining")

    def __enter__(self):
        import logging
        import torch._dynamo  # noqa: F401  (its first import sets these loggers' levels)
        self.saved = [(logging.getLogger(n), logging.getLogger(n).level) for n in self.NAMES]
        for logger, _ in self.saved:
            logger.setLevel(logging.ERROR)
        import contextlib
        import io
        self.stderr = contextlib.redirect_stderr(io.StringIO())
        self.stderr.__enter__()

    def __exit__(self, *exc):
        self.stderr.__exit__(*exc)
        for logger, level in self.saved:
            logger.setLevel(level)


def _reason(exc: BaseException) -> str:
    e, seen = exc, set()
    while e.__cause__ is not None and id(e) not in seen:  # the tracer wraps export's error
        seen.add(id(e))
        e = e.__cause__
    text = [line for line in str(e).strip().splitlines() if line.strip()]
    return (text[0] if text else type(e).__name__)[:300]


def _sequential(gm, module: nn.Module, names: Sequence[str], what: str) -> nn.Sequential:
    """The split graph as layers passing their live values along."""
    graph = list(gm.graph.nodes)
    placeholders = [n for n in graph if n.op == "placeholder"]
    calls = [n for n in graph if n.op == "call_module"]
    out_node = next(n for n in graph if n.op == "output")
    ids = {n: i for i, n in enumerate(graph)}

    # values: a placeholder, a piece's single output, or getitem(piece, k)
    def value_of(arg):
        if isinstance(arg, torch.fx.Node):
            return ids[arg]
        raise McapError(f"{what}: the tracer passed a constant {arg!r} between layers; "
                        f"mcap passes tensors only")

    producer = {}  # value id -> (piece index, output index or None)
    for k, node in enumerate(calls):
        producer[ids[node]] = (k, None)
    for node in graph:
        if node.op == "call_function" and node.target is operator.getitem \
                and isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "call_module":
            producer[ids[node]] = (calls.index(node.args[0]), node.args[1])
            producer.pop(ids[node.args[0]], None)
        elif node.op == "call_function":
            raise McapError(f"{what}: the split graph computes {node.target} between layers; "
                            f"move it inside a submodule")
    result = out_node.args[0]
    if isinstance(result, (tuple, list)):
        if len(result) != 1:
            raise McapError(f"{what}: the model returns {len(result)} values; mcap's loss takes one tensor")
        result = result[0]
    final = value_of(result)

    readers: dict[int, list[int]] = {}
    for k, node in enumerate(calls):
        for a in node.args:
            readers.setdefault(value_of(a), []).append(k)
    readers.setdefault(final, []).append(len(calls))

    live = [ids[p] for p in placeholders]
    layers: "OrderedDict[str, nn.Module]" = OrderedDict()
    modules = dict(module.named_modules())
    for k, node in enumerate(calls):
        made = sorted((v for v, (p, _) in producer.items() if p == k), key=lambda v: v)
        after = [v for v in live + made if any(r > k for r in readers.get(v, ()))]
        gives = [("out", producer[v][1], v) if v in made else ("in", v, None) for v in after]
        name = names[k] if len(calls) == len(names) else f"part{k}"
        kind = type(modules[name]).__name__ if name in modules else "GraphModule"
        piece = getattr(gm, node.target)
        layers[name.replace(".", "_")] = TracedLayer(piece, live, [value_of(a) for a in node.args],
                                                     gives, kind, name)
        live = after
    if live != [final]:
        raise McapError(f"{what}: the last layer does not produce the model's output alone")
    return nn.Sequential(layers)


def first_input(example_batch: Callable):
    """One small example batch on the CPU, whatever device the model is being built on."""
    with torch.device("cpu"):
        inputs, _ = example_batch(2)
    return inputs


__all__ = ["split", "default_split", "first_input", "TracedLayer"]
