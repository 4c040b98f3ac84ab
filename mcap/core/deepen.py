"""Predict a deeper model from a shallow profile (issue 41, item 3). Pure: no torch, no files.

Profiling an LLM at its real depth is what mCAP's incremental profiling cannot afford
(Llama-3.1-8B has 32 blocks; every profiling run holds a window of them), but its blocks are
identical: the same layers, the same parameter bytes, the same activations. So profile ``N``
blocks (for example 4 Llama blocks plus the embedding and the head) and predict the model
with ``M`` blocks from per-position statistics of the repeated block, reused.

Like CAPTURE's layer merger (``mcap.core.capture.merging``) this sits in front of the
predictors: :func:`deepen` turns the shallow profile into a :class:`DeepProfile`, a profile
of the deep model (its layers, its per-layer statistics, no runs of its own) that keeps the
shallow profile it came from; every predictor fits the *shallow* profile as it would any
profile, and :class:`DeepCosts` answers a stage of the deep model from those fitted costs
(``mcap.core.recommend`` routes every ``costs_of`` through it). So every search method,
``evaluate`` and the pages see a profile of the deep model and nothing else changes.

**A stage of the deep model, from stages of the shallow one.** The layers are
``P`` input layers | blocks | ``S`` output layers. A stage's peak depends on where it sits
(issue 29: a block adds 20 MiB on a first stage, 31 on a middle one, 17 in front of the
head, because the first and the last stage peak at other moments, and a last stage is not
checkpointed), so a deep stage holding ``k`` blocks is read from a shallow stage of the same
*class*, holding the same input and output layers and ``k' = min(k, N)`` blocks:

* a **first** stage (it holds input layers): the shallow stage with the same input layers and
  ``k'`` blocks after them (and the same output layers when it holds all the blocks);
* a **last** stage (output layers, no input): ``k'`` blocks in front of the same output layers;
* a **middle** stage (blocks only) starting at block ``s``: ``k'`` blocks from shallow block
  ``min(s, N - k')``, so the front blocks keep their own statistics.

The ``k - k'`` blocks the shallow model does not have each add the increment of one more
block *in that class*, read from the shallow costs at its deepest point: a first (and a
first-and-last) stage's increment is its last block appended behind the others (mCAP 3.1's
``mem_added`` of block ``N - 1``); a last stage's is one more block in front
(``PM(P..end) - PM(P+1..end)``); a middle stage's is its last block appended
(``PM(P..P+N-1) - PM(P..P+N-2)``). Windows of ``k <= N`` blocks are the shallow model's own
predictions, so the deep model's stages that the shallow one has are predicted exactly as
the shallow ones are. ``N >= 2`` (an increment needs two blocks); ``M >= 2``.

The deep profile's ``stats`` are the per-layer statistics mCAP 3.1 would read on the deep
model's first-stage windows: block ``j`` takes those of shallow block ``min(j, N - 1)``
(Listing 1.1 over them gives a first stage the same peak as :class:`DeepCosts`; the other
classes extend along their own increments, which Listing 1.1 cannot express).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np

from mcap.core.blocks import Blocks, find_blocks
from mcap.core.costs import StageCosts
from mcap.core.errors import McapError
from mcap.core.profiling.stats import collect
from mcap.core.types import Layer, LayerStats, ModelInfo, Profile

EXTRA_KEY = "deepened"
MAX_BLOCKS = 4096  # as many as a Hugging Face spec may have (mcap.models.hf.MAX_BLOCKS)


@dataclass(frozen=True)
class DeepProfile(Profile):
    """A profile of the deep model (no runs of its own) and the shallow profile every
    predictor fits (module docstring). A plain ``Profile`` everywhere else."""
    shallow: Optional[Profile] = None


def shallow_blocks(profile: Profile) -> Blocks:
    """The repeated block of a profile's model: at least 2 layers of one kind and equal
    parameter bytes (``mcap.core.blocks``), or McapError naming what the profile has."""
    layers = profile.model.layers
    kinds = [l.kind for l in layers]
    if not any(kinds):
        raise McapError(f"the profile of {profile.model.spec!r} records no layer kinds (a file "
                        "written before kinds were kept): profile it again to deepen it")
    blocks = find_blocks(kinds, len(layers), [l.param_bytes for l in layers])
    if blocks.count < 2:
        raise McapError(f"the profile of {profile.model.spec!r} has no repeated block (two or "
                        f"more consecutive layers of one kind and size) to repeat; its kinds "
                        f"are {', '.join(dict.fromkeys(k for k in kinds if k))}")
    return blocks


def deep_model(info: ModelInfo, blocks: Blocks, count: int, spec: str) -> ModelInfo:
    """``info`` with ``count`` copies of its repeated block, numbered on as its blocks are
    (``block0``.., GPT's ``block1``..; ``block0``.. when they are not numbered), under ``spec``."""
    layers = info.layers
    block = layers[blocks.first]
    names = [l.name for l in layers[blocks.first:blocks.end]]
    match = re.fullmatch(r"(.*?)(\d+)", names[0])
    stem, start = (match.group(1), int(match.group(2))) if match else ("block", 0)
    if not all(n == f"{stem}{start + i}" for i, n in enumerate(names)):
        stem, start = "block", 0
    made = tuple(Layer(f"{stem}{start + i}", block.param_bytes, block.kind) for i in range(count))
    return ModelInfo(spec, layers[:blocks.first] + made + layers[blocks.end:])


def deepen(profile: Profile, blocks: int, spec: str) -> DeepProfile:
    """The profile of the model ``spec`` names, ``profile``'s model with ``blocks`` repeated
    blocks (module docstring). McapError naming the values for a profile that cannot be
    deepened: no repeated block, fewer than 2 profiled, CAPTURE variants or merged layers."""
    if isinstance(blocks, bool) or not isinstance(blocks, int) or not 2 <= blocks <= MAX_BLOCKS:
        raise McapError(f"--blocks must be an integer from 2 to {MAX_BLOCKS:,}, got {blocks!r}")
    if isinstance(profile, DeepProfile):
        profile = profile.shallow
    if profile.variants or EXTRA_KEY in (profile.extra or {}) or "merged" in (profile.extra or {}):
        raise McapError("only a plain mCAP profile can be deepened (this one has CAPTURE "
                        "variants or merged layers); profile the shallow model without them")
    found = shallow_blocks(profile)
    model = deep_model(profile.model, found, blocks, spec)
    extra = dict(profile.extra or {})
    extra[EXTRA_KEY] = {"from": profile.model.spec, "first_block": found.first,
                        "blocks": found.count, "to": blocks}
    return DeepProfile(model=model, setup=profile.setup, stats=deep_stats(profile.stats, found, blocks),
                       runs=(), extra=extra, machine=profile.machine, shallow=profile)


def deep_stats(stats: LayerStats, blocks: Blocks, count: int) -> LayerStats:
    """mCAP 3.1's statistics of the deep model: block ``j`` takes shallow block
    ``min(j, N - 1)``'s, the other layers their own."""
    def spread(values):
        head, body, tail = values[:blocks.first], values[blocks.first:blocks.end], values[blocks.end:]
        return tuple(head) + tuple(body[min(j, len(body) - 1)] for j in range(count)) + tuple(tail)
    return LayerStats(spread(stats.mem_isolated), spread(stats.mem_added))


@dataclass(frozen=True)
class Line:
    """How one class of stages grows past what the shallow model shows: ``value`` at depth
    ``depth`` plus ``slope`` per block, never below the middle class's line plus ``floor``
    (the persistent bytes of the class's input and output layers; None for the middle)."""
    depth: int
    value: int
    slope: int
    floor: Optional[int] = None

    def at(self, k: np.ndarray, middle: "Line") -> np.ndarray:
        own = self.value + (k - self.depth) * self.slope
        if self.floor is None:
            return own
        return np.maximum(own, middle.at(k, middle) + self.floor)


class DeepCosts(StageCosts):
    """Stage costs of the deep model from the shallow profile's fitted costs ``shallow`` and
    its ``measured`` windows (module docstring). ``persistent[l]``: bytes layer ``l`` of the
    shallow model holds for the whole step (weights, gradients, optimizer state)."""

    def __init__(self, shallow: StageCosts, blocks: Blocks, count: int, measured: dict,
                 persistent=None):
        if blocks.count < 2:
            raise McapError(f"predicting {count} blocks needs a profile of 2 or more, got {blocks.count}")
        self.shallow, self.blocks, self.count = shallow, blocks, int(count)
        self.measured = dict(measured)
        self.persistent = list(persistent or [0] * blocks.total)
        self.num_layers = blocks.before + self.count + blocks.after
        self.predictor = shallow.predictor
        self.table = None  # the lines make it non-additive: searches take the general path
        self.details = dict(shallow.details or {})
        self.details[EXTRA_KEY] = {"blocks": blocks.count, "to": self.count}
        self._values: dict = {}
        self._lines: dict = {}
        self.middle = self._line((-1, -1))

    # --- the shallow model, class by class -------------------------------------------------

    def _window(self, cls: tuple[int, int], j: int) -> tuple[int, int]:
        """The shallow window of class ``cls`` (input layer it starts at or -1, output layer
        it ends at or -1) holding ``j`` blocks."""
        P, N = self.blocks.before, self.blocks.count
        pre, suf = cls
        if pre >= 0 and suf >= 0:
            return pre, suf
        if pre >= 0:
            return pre, P + j - 1
        if suf >= 0:
            return P + N - j, suf
        return P, P + j - 1

    def _is_measured(self, cls, j) -> bool:
        return self._value(cls, j)[1]

    def _value(self, cls, j) -> tuple[int, bool]:
        """(peak, measured) of the class's window of ``j`` blocks: the profile's measurement
        (a middle window anywhere among the blocks), else the predictor's."""
        key = (cls, j)
        if key not in self._values:
            a, z = self._window(cls, j)
            found = self.measured.get((a, z))
            if found is None and cls == (-1, -1):
                P, N = self.blocks.before, self.blocks.count
                found = max((p for (x, y), p in self.measured.items()
                             if P <= x and y < P + N and y - x + 1 == j), default=None)
            self._values[key] = (int(found), True) if found is not None else \
                (int(self.shallow.stage(a, z)), False)
        return self._values[key]

    def _line(self, cls) -> Line:
        """The class's growth: from its deepest pair of measured depths j-1, j (the shallow
        predictor's last two depths when it has none), floored by the middle line plus the
        persistent bytes of its input and output layers (module docstring)."""
        if cls in self._lines:
            return self._lines[cls]
        P, N = self.blocks.before, self.blocks.count
        pre, suf = cls
        if pre >= 0 and suf >= 0:  # the whole model on one stage: a first stage's growth
            first = self._line((pre, -1))
            value = self._value(cls, N)[0]
            line = Line(N, value, first.slope, self._floor(cls))
            self._lines[cls] = line
            return line
        low = 1 if cls == (-1, -1) else 0
        depth = next((j for j in range(N, low, -1)
                      if self._is_measured(cls, j) and self._is_measured(cls, j - 1)), N)
        value = self._value(cls, depth)[0]
        slope = value - self._value(cls, depth - 1)[0]
        line = Line(depth, value, slope, None if cls == (-1, -1) else self._floor(cls))
        self._lines[cls] = line
        return line

    def _floor(self, cls) -> int:
        P, N = self.blocks.before, self.blocks.count
        pre, suf = cls
        held = (list(range(pre, P)) if pre >= 0 else []) + \
            (list(range(P + N, suf + 1)) if suf >= 0 else [])
        return sum(self.persistent[i] for i in held)

    # --- the deep model ---------------------------------------------------------------------

    def stage_costs(self, first, last):
        shape = np.shape(first)
        a = np.asarray(first, dtype=np.int64).ravel()
        z = np.asarray(last, dtype=np.int64).ravel()
        P, N, M = self.blocks.before, self.blocks.count, self.count
        end, shift = P + M, M - N
        k = np.clip(np.minimum(z, end - 1) - np.maximum(a, P) + 1, 0, None)
        pre = np.where(a < P, a, -1)
        suf = np.where(z >= end, z - shift, -1)
        out = np.zeros(len(a), dtype=np.int64)
        none = k == 0  # input or output layers only: the shallow model's own window
        if none.any():
            a2 = np.where(a >= end, a - shift, a)[none]
            z2 = np.where(z >= end, z - shift, z)[none]
            out[none] = [self._known(x, y) for x, y in zip(a2.tolist(), z2.tolist())]
        for p_, s_ in set(zip(pre[~none].tolist(), suf[~none].tolist())):
            cls = (p_, s_)
            sel = ~none & (pre == p_) & (suf == s_)
            kk = k[sel]
            line = self._line(cls)
            grown = line.at(kk, self.middle)
            shown = np.asarray([self._value(cls, int(j))[0] if j <= line.depth and j <= N else 0
                                for j in kk.tolist()], dtype=np.int64)
            out[sel] = np.where((kk <= line.depth) & (kk <= N), shown, grown)
        return np.maximum(out, 0).reshape(shape)

    def _known(self, a: int, z: int) -> int:
        found = self.measured.get((a, z))
        return int(found) if found is not None else int(self.shallow.stage(a, z))


def unmeasured(profile: DeepProfile) -> list[str]:
    """The kinds of stage (first, middle, last stages holding blocks) whose growth past the
    shallow depth rests on the predictor: the profile measured no two depths of them."""
    shallow = profile.shallow
    found = shallow_blocks(shallow)
    L = shallow.model.num_layers
    seen = {w for w, _ in collect(shallow.runs, L).peaks}
    P, N = found.before, found.count
    kinds = {"first stages": [(0, P + j - 1) for j in range(N + 1)],
             "middle stages": [(P + s, P + s + j - 1) for j in range(1, N + 1) for s in range(N - j + 1)],
             "last stages": [(P + N - j, L - 1) for j in range(N + 1)]}
    out = []
    for what, windows in kinds.items():
        depths = {z - a for a, z in windows if (a, z) in seen}
        if not any(d in depths and d - 1 in depths for d in depths):
            out.append(what)
    return out


def deepened(profile: Profile) -> bool:
    return isinstance(profile, DeepProfile) and profile.shallow is not None


def costs(profile: DeepProfile, predictor: str, fit: Callable[[Profile, str], StageCosts]) -> StageCosts:
    """``predictor``'s stage costs of the deep model: ``fit`` on the shallow profile, read
    through :class:`DeepCosts` with the shallow profile's measured windows."""
    from mcap.core.fits import layer_needs
    shallow = profile.shallow
    found = shallow_blocks(shallow)
    L = shallow.model.num_layers
    windows = collect(shallow.runs, L)
    measured = {w: p for w, p in windows.peaks if w not in set(windows.bounds)}
    persistent = [n.need for n in layer_needs(shallow.model, shallow.setup.optimizer)]
    return DeepCosts(fit(shallow, predictor), found, profile.model.num_layers - L + found.count,
                     measured, persistent)
