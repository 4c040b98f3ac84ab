"""The window tables of the schedules' memory model (issue 39): one op quantity per chunk
window of layers a..b, read where the profile measured it, else by mCAP's reading
(``iso(a) + sum of added``, :func:`mcap.core.profiling.stats.solve_windows`; mCAP 3.2), or,
for an op's rise above its start (a maximum, not a sum), composed layer by layer
(:class:`RiseTable`); zero bubble's first chunk read apart (:class:`SplitTable`). Pure.
:mod:`mcap.core.schedules.memory` replays an action list with them."""
from __future__ import annotations

import collections
import dataclasses
from typing import Optional, Sequence

import numpy as np

from mcap.core.profiling.stats import solve_windows


class WindowTable:
    """One op quantity per window: measured where measured, else off a measured window with
    the same start (:meth:`get`), else mCAP's reading (``iso(a) + sum added``). Quantities
    may be negative: they are read with an offset."""

    def __init__(self, num_layers: int, measured: dict):
        self.measured = dict(measured)
        self.L = num_layers
        offset = 1 + max((abs(v) for v in measured.values()), default=0) * 2
        shifted = {w: v + offset for w, v in measured.items()}
        iso, added, missing = solve_windows(num_layers, shifted)
        self.iso = [None if v is None else v - offset for v in iso]
        self.added = [0 if v is None else v for v in added]
        self.added[0] = 0
        # A layer no measured window ends at (a chunk may not end there: a view output
        # under zero bubble) has no added of its own: it is read together with the next
        # one, off n..l-1 and n..l+1, and no window may end at it.
        # (Layer l+1 then has no added of its own either: that is not a second gap.)
        self.no_end = set()
        still, paired = [], set()
        for l in missing.added:
            if l in paired:
                continue
            pair = next((n for n in range(l - 1, -1, -1)
                         if (n, l - 1) in measured and (n, l + 1) in measured), None)
            if pair is None or l + 1 >= num_layers:
                still.append(l)
                continue
            self.added[l] = measured[(pair, l + 1)] - measured[(pair, l - 1)]
            self.added[l + 1] = 0
            paired.add(l + 1)
            self.no_end.add(l)
        self.missing = dataclasses.replace(missing, added=tuple(still))
        self.prefix = np.concatenate([[0], np.cumsum(self.added)])

    def get(self, a: int, b: int) -> Optional[int]:
        m = self.measured
        if (a, b) in m:
            return m[(a, b)]
        if b in self.no_end:
            # a view (no chunk may end there but the first): it allocates nothing of its
            # own, so a window ending at it holds what the one ending a layer before holds
            return self.get(a, b - 1) if b > a else None
        if self.iso[a] is None and a - 1 in self.no_end and \
                not any(s_ == a for s_, _ in m):
            return self.get(a - 1, b)  # likewise, a window starting just after it
        if self.iso[a] is None:
            # a window starting at a layer no window ends at (a view: no reading of it alone):
            # its shortest measured window from a, and what the layers after it add
            m_ = min((e for s_, e in m if s_ == a and e <= b), default=None)
            if m_ is None or any(l in self.missing.added for l in range(m_ + 1, b + 1)):
                return None
            return int(m[(a, m_)] + self.prefix[b + 1] - self.prefix[m_ + 1])
        # A measured window with the same start a..B, less what b+1..B add (off n..b and
        # n..B): the chunk's first layer shapes what the next ones keep (the zero-bubble I of
        # a chunk that starts at a pool keeps 512 KiB less on VGG11 than one that starts a
        # layer earlier), which a window from a keeps and mCAP's iso(a) + added does not.
        # Checked on the bundled sweeps (never read here): as good or better on every
        # schedule of GPT-2, Llama and VGG11 (bench/log/2026-11-29-schedules.md). A window
        # a..B that ends before b serves too, past b first (a chunk from a pool keeps what
        # one from the layer before keeps: the I of 2..18 on a 96-px VGG11).
        ends = [e for s_, e in m if s_ == a and e != b]
        for B in sorted(ends, key=lambda e: (e < b, abs(e - b))):  # past b first, nearest
            for n in range(a - 1, -1, -1):
                if (n, B) in m and (n, b) in m:
                    return int(m[(a, B)] - m[(n, B)] + m[(n, b)])
        # what layers a+1..b add, read at once off two measured windows n..a and n..b
        # (mCAP's pair, wider): no layer in between needs its own reading, so a layer no
        # window may end at (a run that failed there) is stepped over
        for n in range(a, -1, -1):
            if (n, a) in m and (n, b) in m:
                return int(self.iso[a] + m[(n, b)] - m[(n, a)])
        if any(self.missing.added and l in self.missing.added for l in range(a + 1, b + 1)):
            return None
        return int(self.iso[a] + self.prefix[b + 1] - self.prefix[a + 1])


class RiseTable:
    """An op's rise above its start (the ``t`` of a window), which is a *maximum* over the
    op's layers, not a sum, so mCAP's ``iso + sum added`` cannot read it. The layers of a
    chunk run one after another, forwards first to last, backwards last to first; while
    layer l runs, the layers before it (in that order) have left their net bytes (``d``,
    which adds up per layer: the window's ``d`` table) and layer l rises by what it rises
    alone (``t(l..l)``, measured):

        F:     t(a..b) = max over l of  d(a..l-1) + t(l..l)
        B, I:  t(a..b) = max over l of  d(l+1..b) + t(l..l)
        W:     t(a..b) = max over l of  d(a..l-1) + g(l) + t(l..l)

    The zero-bubble W (torch's ``stage_backward_weight``) runs the chunk's parameter groups
    first layer to last, one ``autograd.grad`` each: the group's saved gradients go when it
    is done (``d``), its weight gradients become ``.grad`` (the chunk's first W: in ``d``
    too) or are added into it, and the last group's stay held by the loop's variable while
    the next group runs (``g(l)``: the weight gradients of the nearest layer before l that
    has any, read as the first W's ``d`` less this W's; 0 for the first W).

    A zero-bubble I keeps its graph (``retain_graph=True``); with no parameter group in the
    chunk, it lets all of it go when it returns, so a unit runs over its output gradient
    alone: ``t(a..b) = max over l of  out(l) + t(l..l)`` (the last unit: ``t(b..b)``).

    exact for forwards without checkpointing, mCAP-like for the rest. A layer no chunk may
    end at (a view) is read together with the next ones (:meth:`_units`). Measured windows
    are read as measured; without a layer's own reading, the sum form is used."""

    def __init__(self, kind: str, num_layers: int, measured: dict, d, first=None,
                 out_bytes=None, layers=None):
        self.kind, self.measured, self.d = kind, dict(measured), d
        self.out_bytes = out_bytes
        # per layer (parameter bytes, whether torch saves its output for its backward,
        # whether its parameters are one group): what a zero-bubble W lets go of as it goes
        # (:meth:`_released`)
        self.layers = layers
        # the d table of the chunk's first W, for a later W (its held weight gradients)
        self.first = first
        # the share of a layer's parameter bytes a W's group lets go of with its graph: the
        # low-precision copy of its weights autocast saved (half their fp32 bytes under
        # bf16 autocast), none where the layer saved the weights themselves (:meth:`_released`)
        self.cast = 0.0
        self.sum = WindowTable(num_layers, measured)
        # Whether a backward's layer runs while the gradient it was handed is still held,
        # with the gradient of the chunk's output (held by the caller until the op returns):
        # so for conv stacks (a ReLU hands a conv its gradient), not for transformer
        # blocks, whose rise comes after the residual gradient is let go. Chosen per table
        # on the profile's own windows of several layers (:meth:`_fit_offset`).
        self.grads_held = False
        self.offset, err = self._fit_offset()
        if kind in ("B", "I") and out_bytes is not None:
            self.grads_held = True
            offset, err_held = self._fit_offset()
            if err_held < err:
                self.offset = offset
            else:
                self.grads_held = False
        self.form = self._choose_form(num_layers)

    def _fit_offset(self) -> tuple[int, float]:
        """What a window of several layers rises beyond the composition, read on the
        profile's own windows of several layers (0 for forwards and whole backwards; the
        zero-bubble I keeps a gradient per layer boundary the composition does not see):
        the most common difference, used only where most windows show it; and the error
        left on those windows."""
        diffs = [v - c for (a, b), v in self.measured.items() if b > a
                 for c in [self._composed(a, b)] if c is not None]
        if not diffs:
            return 0, 0.0
        common, count = collections.Counter(diffs).most_common(1)[0]
        offset = common if count * 2 > len(diffs) else 0
        return offset, float(sum(abs(x - offset) for x in diffs))

    def _choose_form(self, num_layers: int) -> str:
        """``composed`` or ``sum``: the form with the smaller error on the profile's own
        windows of several layers that no statistic of the sum form is read from (windows
        not starting at the first layer of the table's windows). The zero-bubble W computes
        every layer's weight gradients in one pass, so its rise adds up across layers;
        forwards and whole backwards run layer by layer."""
        if self.kind == "F" or not self.measured:
            return "composed"
        start = min(a for a, _ in self.measured)
        held = [(a, b, v) for (a, b), v in self.measured.items() if b > a and a > start]
        errs = {"composed": 0.0, "sum": 0.0, "progressive": 0.0, "progressive-cast": 0.0}
        # group by group only where each layer with parameters is one group
        progressive = self.kind == "W" and self.layers is not None and \
            self.out_bytes is not None and all(g for p, _, g in self.layers if p)
        for a, b, v in held:
            c = self._composed(a, b)
            s = self.sum.iso[a] + self.sum.prefix[b + 1] - self.sum.prefix[a + 1] \
                if self.sum.iso[a] is not None else None
            if c is None or s is None:
                continue
            errs["composed"] += abs(c + self.offset - v)
            errs["sum"] += abs(s - v)
            for form, cast in (("progressive", 0.0), ("progressive-cast", 0.5)) \
                    if progressive else ():
                self.cast = cast
                p = self._composed(a, b, progressive=True)
                errs[form] += abs((c + self.offset if p is None else p) - v)
        forms = ("composed", "sum") + (("progressive", "progressive-cast") if progressive
                                       else ())
        form = min(forms, key=lambda f: (errs[f], forms.index(f)))
        self.cast = 0.5 if form == "progressive-cast" else 0.0
        return "progressive" if form == "progressive-cast" else form

    def get(self, a: int, b: int) -> Optional[int]:
        if (a, b) in self.measured:
            return self.measured[(a, b)]
        if self.form == "sum":
            got = self.sum.get(a, b)
            if got is not None:
                return got
        if self.form == "progressive":
            got = self._composed(a, b, progressive=True)
            if got is not None:
                return got
        composed = self._composed(a, b)
        if composed is None:
            return self.sum.get(a, b)
        return composed + (self.offset if b > a else 0)

    def _units(self, a: int, b: int) -> Optional[list]:
        """The window's layers in the units they were measured alone: a layer, or a layer
        no chunk may end at (a view, e.g. ``flatten``, under zero bubble) together with the
        layers after it up to the first one a window ends at. None when a unit is missing."""
        out, l = [], a
        while l <= b:
            if (l, l) in self.measured:
                out.append((l, l))
                l += 1
                continue
            m = next((m for m in range(l + 1, b + 1) if (l, m) in self.measured), None)
            if m is None:
                return None
            out.append((l, m))
            l = m + 1
        return out

    def _released(self, a: int, e: int) -> int:
        """What a zero-bubble W of a chunk from layer a holds over, net, once it has run the
        parameter groups of layers a..e (``progressive``): torch's ``stage_backward_weight``
        runs one ``autograd.grad`` per group without keeping the graph, so each group lets go
        of the output gradient the I saved for it and of its layer's saved input, unless the
        layer before saves that same tensor as its output (a ReLU: freed with the rest of the
        graph at the end of the W) or it is the chunk's input; the chunk's first W keeps
        each group's weight gradients as ``.grad``. Found on the held-out VGG11's misses
        (bench/log/2026-11-29-schedules.md, third session). Under autocast a group also lets
        go of the low-precision copy of its weights its layer saved (``cast``: fourth
        session, found on a held-out VGG11 in bf16 autocast)."""
        out = 0
        for j in range(a, e + 1):
            params = self.layers[j][0]
            if not params:
                continue
            out -= self.out_bytes[j] + int(params * self.cast)
            if j > a and not self.layers[j - 1][1]:
                out -= self.out_bytes[j - 1]
            if self.first is None:
                out += params
        return out

    def _composed(self, a: int, b: int, progressive: bool = False) -> Optional[int]:
        """The composition (class docstring); ``progressive``: a W's layers with parameters
        only, over what the groups before let go of as they ran (:meth:`_released`) instead
        of the W's whole ``d``; None when the window has no layer with parameters."""
        units = self._units(a, b)
        if units is None:
            return None
        best, grads = None, 0
        for k, (l, m) in enumerate(units):
            if progressive:
                below = 0 if l == a else self._released(a, l - 1)
            elif self.kind in ("F", "W"):
                below = 0 if l == a else _held_over(self.d, a, l - 1, units[:k])
            elif self.kind == "I" and self.layers is not None and \
                    not any(self.layers[j][0] for j in range(a, b + 1)):
                # an I keeps its graph (``retain_graph=True``) and, with no parameter group
                # to keep any of it for, lets all of it go once it returns: while a unit
                # runs, the later ones have let go of nothing they saved, which their d
                # read alone counts as gone; only this unit's output gradient is new
                below = 0 if m == b else self.out_bytes[m]
            else:
                below = 0 if m == b else _held_over(self.d, m + 1, b, units[k + 1:])
                if m < b and self.grads_held:
                    # the gradient of this unit's output, and the chunk's from its caller
                    below += self.out_bytes[m] + (
                        self.out_bytes[b] if b < len(self.out_bytes) - 1 else 0)
            if below is None:
                return None
            below += grads
            if self.first is not None:
                mine, first = self.d.get(l, m), self.first.get(l, m)
                if mine is None or first is None:
                    return None
                # this group's weight gradients, held while the next group runs
                grads = first - mine if first - mine > 0 else grads
            if progressive and not any(self.layers[j][0] for j in range(l, m + 1)):
                continue  # no group of its own: its rise alone is not one inside the W
            v = below + self.measured[(l, m)]
            best = v if best is None else max(best, v)
        return best


def _held_over(table, a: int, b: int, units) -> Optional[int]:
    """What layers a..b hold (a ``d``, which adds up per layer): read over the window, else
    added up over its units (a window may not start inside a view's unit either)."""
    got = table.get(a, b)
    if got is not None:
        return got
    parts = [table.get(l, m) for l, m in units]
    return None if any(p is None for p in parts) else sum(parts)


class SplitTable:
    """A quantity whose chunk 0 behaves differently throughout: under zero bubble the first
    chunk's input needs no gradient, so its I does nothing and its W the whole backward
    (``PipelineStage.backward_weight_one_chunk``), while every other chunk's I keeps the
    graph for its W. Windows starting at layer 0 and the others are read apart, each with
    mCAP's reading over its own windows (the split-backward profiling plan measures both
    kinds: :func:`split_plan`)."""

    def __init__(self, num_layers: int, measured: dict, make=None):
        make = make or WindowTable
        self.first = make(num_layers, {w: v for w, v in measured.items() if w[0] == 0})
        self.rest = make(num_layers, {w: v for w, v in measured.items() if w[0] > 0})
        self.measured = measured

    def get(self, a: int, b: int) -> Optional[int]:
        return (self.first if a == 0 else self.rest).get(a, b)


def split_plan(runs: Sequence[Sequence[int]], inner: Sequence[Sequence[int]]) -> list:
    """The profiling runs of a split-backward schedule: mCAP's plan over the G·V chunks
    (``runs``) and mCAP's plan over layers 1..L-1 on G·V-1 chunks behind layer 0 alone
    (``inner``), whose windows read the I and W bytes of chunks that do not start at layer
    0 (:class:`SplitTable`): 2(L - G·V + 1) runs."""
    out = [tuple(r) for r in runs]
    out += [b for b in ((1, *r) for r in inner) if b not in out]
    return out


def _table(kind: str, num_layers: int, measured: dict):
    return SplitTable(num_layers, measured) if kind in ("I", "W") else \
        WindowTable(num_layers, measured)


def _rise_table(kind: str, num_layers: int, measured: dict, d, first=None, out_bytes=None,
                layers=None):
    """The rise table of an op kind, over its ``d`` table (and, for a W after the chunk's
    first, the first W's ``d``: :class:`RiseTable`), split apart like them."""
    if isinstance(d, SplitTable):
        def part(n, m):
            at0 = all(w[0] == 0 for w in m)
            pick = (lambda t: t.first if at0 else t.rest)
            return RiseTable(kind, n, m, pick(d), None if first is None else
                             pick(first) if isinstance(first, SplitTable) else first, out_bytes,
                             layers)
        return SplitTable(num_layers, measured, part)
    return RiseTable(kind, num_layers, measured, d, first, out_bytes, layers)
