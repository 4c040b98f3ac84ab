"""The teaching view's link to mCAP's statistics (issue 40, item 9). Pure.

Two generated paragraphs, each from the numbers it names:

- :func:`statistics_paragraph`: where a device's number comes from: ``mem_isolated`` of the
  stage's first layer plus ``mem_added`` of the others (mCAP 3.1 and Listing 1.1, the
  statistics the Layers page draws), and what the predictor shown adds to that sum (the
  once-per-stage terms it fits on the profile's own runs); :func:`statistics_rows` gives the
  same numbers per device for the chart;
- :func:`balance_paragraph`: why balancing by parameters is not balancing memory: the split
  by parameter bytes against the split by predicted peak (mCAP's), each with its fullest
  device, and where the bytes that are not parameter state sit.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mcap.core.errors import McapError
from mcap.core.partition import windows
from mcap.core.teachwords import listed, mib, plural
from mcap.core.types import LayerStats


@dataclass(frozen=True)
class StatRow:
    """One device's number, taken apart: ``isolated`` (mem_isolated of its first layer) +
    ``added`` (the sum of mem_added of the rest) is the paper's sum; ``other`` is what the
    predictor shown adds to it (negative: takes off); ``predicted`` their total."""
    device: int
    first: int
    last: int
    isolated: int
    added: int
    other: int
    predicted: int
    top_added: int     # the layer with the largest mem_added on the device (-1: none)

    @property
    def paper(self) -> int:
        return self.isolated + self.added


def statistics_rows(stats: LayerStats, balance: Sequence[int],
                    predicted: Sequence[int]) -> tuple[StatRow, ...]:
    """Per device: its window, mem_isolated of the first layer, the sum of mem_added of the
    others, and what the predictor adds (``predicted`` per device, the number shown)."""
    if sum(balance) != stats.num_layers:
        raise McapError(f"balance sums to {sum(balance)} but the statistics have "
                        f"{stats.num_layers} layers")
    if len(predicted) != len(balance):
        raise McapError(f"{len(predicted)} predicted peaks for {len(balance)} stages")
    out = []
    for d, (a, z) in enumerate(windows(tuple(balance))):
        added = [(int(stats.mem_added[l] or 0), l) for l in range(a + 1, z + 1)]
        iso = int(stats.mem_isolated[a])
        total = sum(x for x, _ in added)
        top = max(added)[1] if added else -1
        out.append(StatRow(d, a, z, iso, total, int(predicted[d]) - iso - total,
                           int(predicted[d]), top))
    return tuple(out)


def _layer(names: Sequence[str], l: int) -> str:
    return f"layer {l} ({names[l]})" if names and l < len(names) and names[l] else f"layer {l}"


def statistics_paragraph(stats: LayerStats, names: Sequence[str], balance: Sequence[int],
                         predicted: Sequence[int], predictor: str) -> str:
    """How the fullest device's number follows from mem_isolated and mem_added (module
    docstring); ``predictor`` is the label of the predictor that gave ``predicted``."""
    rows = statistics_rows(stats, balance, predicted)
    r = max(rows, key=lambda x: x.predicted)
    n = r.last - r.first + 1
    text = ("Where each device's number comes from: the profile's two statistics per layer "
            "(the Layers page draws them). mem_isolated(l) is the peak of a device holding "
            "layer l alone; mem_added(l) is how much a device's peak grows when layer l is "
            "added after the layers before it. ")
    if n == 1:
        text += (f"Device {r.device}, the fullest, holds {_layer(names, r.first)} alone: "
                 f"mem_isolated is {mib(r.isolated)}, the paper's prediction")
    else:
        text += (f"Device {r.device}, the fullest, holds layers {r.first}-{r.last}: "
                 f"mem_isolated({r.first}) = {mib(r.isolated)} plus mem_added of its other "
                 f"{plural(n - 1, 'layer')}, {mib(r.added)} in all (the largest, "
                 f"{_layer(names, r.top_added)}: {mib(int(stats.mem_added[r.top_added] or 0))}), "
                 f"give {mib(r.paper)}, the paper's sum (Listing 1.1)")
    if r.other == 0:
        return text + f", which is the number shown ({predictor})."
    return (text + f". The predictor shown ({predictor}) says {mib(r.predicted)}: it "
            f"{'adds' if r.other > 0 else 'takes off'} {mib(abs(r.other))} with the "
            "once-per-stage terms it fits on the profile's own runs (a workspace a stage pays "
            "once, not once per layer). The chart below takes every device's number apart "
            "the same way.")


def _params(balance: Sequence[int], param_bytes: Sequence[int]) -> list[int]:
    return [sum(param_bytes[a:z + 1]) for a, z in windows(tuple(balance))]


def balance_paragraph(by_params: tuple, by_memory: tuple, param_bytes: Sequence[int],
                      copies: int, params_label: str, memory_label: str) -> str:
    """Why balancing parameters is not balancing memory, from two splits (each ``(balance,
    predicted peaks)``): their parameter bytes per device, their fullest devices, and where
    the bytes besides the parameter state sit."""
    (pb, pp), (mb, mp) = by_params, by_memory
    p_params, m_params = _params(pb, param_bytes), _params(mb, param_bytes)
    p_rest = [p - copies * q for p, q in zip(pp, p_params)]
    pf = max(range(len(pp)), key=lambda d: pp[d])
    mf = max(range(len(mp)), key=lambda d: mp[d])
    dash = "-".join
    text = (f"Balancing parameters is not balancing memory. Balanced by parameters "
            f"({params_label}: {dash(map(str, pb))}) the devices hold "
            f"{listed(mib(x) for x in p_params)} of parameters, but "
            f"{listed(mib(x) for x in p_rest)} besides their parameter state (activations, "
            f"buffers, workspaces), so device {pf} peaks at {mib(pp[pf])}: "
            f"{mib(copies * p_params[pf])} of parameter state (weights, gradients, optimizer; "
            f"{copies} copies) and {mib(p_rest[pf])} besides. ")
    if tuple(pb) == tuple(mb):
        return text + f"Here {memory_label} picks the same split."
    rest = [p - copies * q for p, q in zip(mp, m_params)]
    heavy = max(range(len(rest)), key=lambda d: rest[d])
    lower = (max(pp) - max(mp)) / max(pp) if max(pp) else 0.0
    return (text + f"Balanced by memory ({memory_label}: {dash(map(str, mb))}) the fullest "
            f"device is device {mf} at {mib(mp[mf])}, "
            + (f"{100 * lower:.1f}% lower" if lower > 0 else f"{-100 * lower:.1f}% higher")
            + f". On that split device {heavy}, which holds the most besides parameter state "
            f"({mib(rest[heavy])}), gets {mib(m_params[heavy])} of parameters; the devices hold "
            f"{listed(mib(x) for x in m_params)} of parameters in all. Balancing by time "
            "(torchgpipe's balance_by_time) times the real model; the Recommend page compares "
            "its split the same way.")
