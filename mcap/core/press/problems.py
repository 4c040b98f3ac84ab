"""One partitioning's MPress planning problem as a record (:class:`Problem`) and how it is
built: from a profile with MPress statistics (:func:`problem`) or from bare numbers
(:class:`PressNumbers`, :func:`build`; tests, benchmarks, scaling). ``model.py``'s docstring
says what every field means for memory and time. Pure."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.partition import validate, windows
from mcap.core.press.events import stage_events
from mcap.core.press.timing import _penalty, _transfer, live_intervals
from mcap.core.stagetime import op_order
from mcap.core.types import Profile


@dataclass(frozen=True)
class Problem:
    """One partitioning's planning problem (module docstring). Layers are global indices."""
    model: str
    balance: tuple[int, ...]
    base: tuple[int, ...]           # keep-all predicted peak per stage, bytes
    held: tuple[int, ...]           # micro-batches in flight per stage
    saved: tuple[int, ...]          # per layer, bytes per micro-batch
    forward: tuple[float, ...]      # per layer, seconds per micro-batch
    chunks: int
    costs: tuple[dict, ...]         # per layer: {"recompute": s, "swap": s, "d2d": s} per iteration
    live: tuple[float, ...]         # per layer: shortest live interval over micro-batches, s
    capacity: Optional[int] = None
    pinned: tuple[int, ...] = ()    # per layer: bytes of saved held as stage input/output
    seg: tuple = ()                 # per layer i: ((owner, bytes), ...) passed into i, same stage
    shared: tuple = ()              # ((owner, last saver, bytes), ...), both on one stage
    work: tuple[int, ...] = ()      # per layer: measured backward bytes (PressStats.backward_bytes)
    params: tuple[int, ...] = ()    # per layer: parameter bytes (its gradient's size)
    # per layer: (first, accumulate, swapped) backward transients (PressStats.backward_transients)
    transients: tuple = ()
    # per layer: (keep, swapped) forward transients (PressStats.forward_transients)
    forward_peaks: tuple = ()
    # per layer: (forward, backward) recomputed (PressStats.recompute_transients)
    recompute_peaks: tuple = ()
    schedule: str = "gpipe"
    parallel: int = 0               # stages that run at once (0: all; CPU: cores // threads)
    segment_bytes: int = 0          # kept per recompute segment and micro-batch (RNG state)
    # per stage: its keep-all memory event by event (events.py), derived from the above
    events: tuple = field(default=(), compare=False, repr=False)

    def movable(self, l: int) -> int:
        """Bytes reducing layer ``l`` can move out (module docstring, pinned bytes)."""
        return self.saved[l] - (self.pinned[l] if self.pinned else 0)

    def swapped_back(self, l: int) -> int:
        """Bytes of swapped layer ``l`` back at the height of its own backward (:func:`swap_back`)."""
        return swap_back(self.movable(l), self.transients[l] if self.transients else None)

    def forward_change(self, l: int, action: str = "swap") -> int:
        """How a reduced layer changes its stage's bytes during its own forward (<= 0): what
        its forward holds swapped (or recomputed) less what it holds kept. Without
        measurements 0: the moved storages' originals live while the layer runs."""
        if not self.forward_peaks:
            return 0
        keep, swapped = self.forward_peaks[l]
        if action == "recompute" and self.recompute_peaks:
            return min(0, self.recompute_peaks[l][0] - keep)
        return min(0, swapped - keep)

    def recomputed_back(self, l: int) -> int:
        """Bytes recomputed layer ``l`` holds beyond kept at the height of its own backward,
        when it ends its recompute run (its forward runs again first): what its measured
        recomputed backward holds beyond the kept one (``recompute_transients``; at least
        its movable bytes, which come back); else its movable bytes."""
        m = self.movable(l)
        if not self.recompute_peaks or not self.transients:
            return m
        return max(m, self.recompute_peaks[l][1] - self.transients[l][1])

    @property
    def stages(self) -> int:
        return len(self.balance)

    def stage_of(self) -> tuple[int, ...]:
        return tuple(s for s, n in enumerate(self.balance) for _ in range(n))

    def layers(self, s: int) -> range:
        a, z = windows(self.balance)[s]
        return range(a, z + 1)


@dataclass(frozen=True)
class PressNumbers:
    """The bare numbers a :class:`Problem` is built from (:func:`build`), per layer unless
    said: ``base`` the keep-all peak per stage, ``saved`` bytes and ``forward`` seconds per
    micro-batch, the host and d2d bandwidths (bytes/s). ``overlap``: transfers may hide in
    live intervals (a device with copy engines, ``model.py``'s docstring); ``boundaries``:
    ``PressStats.boundaries`` (empty: nothing pinned); ``work``:
    ``PressStats.backward_bytes``, ``params``: each layer's parameter bytes and
    ``transients`` / ``forward_peaks``: ``PressStats.backward_transients`` /
    ``forward_transients`` (empty: params + work, and saved bytes, in their place; they
    locate the stage's peak in its iteration, ``events.py``, and say how much of a reduced
    layer is on the device while it runs); ``swap_seconds``, ``recompute_peaks``,
    ``segment_bytes``, ``recompute_seconds``: the other ``PressStats`` fields of those
    names; ``parallel``: stage processes that run at once (0: all)."""
    model: str
    balance: Sequence[int]
    base: Sequence[int]
    schedule: str
    chunks: int
    saved: Sequence[int]
    forward: Sequence[float]
    host_bandwidth: float
    d2d_bandwidth: float
    capacity: Optional[int] = None
    overlap: bool = True
    boundaries: Sequence = ()
    shared: Sequence = ()
    work: Sequence = ()
    params: Sequence = ()
    transients: Sequence = ()
    forward_peaks: Sequence = ()
    swap_seconds: Sequence = ()
    recompute_peaks: Sequence = ()
    parallel: int = 0
    segment_bytes: int = 0
    recompute_seconds: Sequence = ()


def problem(profile: Profile, balance: Sequence[int], capacity: Optional[int] = None,
            predictor: Optional[str] = None, base: Optional[Sequence[int]] = None) -> Problem:
    """The planning problem of ``balance`` from a profile with MPress statistics. ``base``:
    the keep-all peaks per stage when they were measured (a run of ``balance`` with every
    layer kept, ``mcap.workflow.press.keep_all_peaks``); else the profile's prediction."""
    from mcap.core.recommend import costs_of
    check_profile(profile)
    if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                 or capacity <= 0):
        raise McapError(f"capacity must be a positive number of bytes, got {capacity!r}")
    part = validate(balance, profile.model.num_layers)
    if base is None:
        base = costs_of(profile, predictor).peaks(part.balance)
    elif len(base) != len(part.balance) or any(isinstance(b, bool) or not isinstance(b, int)
                                               or b <= 0 for b in base):
        raise McapError(f"measured keep-all peaks {list(base)!r} do not give one positive "
                        f"byte count per stage of balance {','.join(map(str, part.balance))}")
    press = profile.press
    return build(PressNumbers(
        profile.model.spec, part.balance, base, profile.setup.schedule, profile.setup.chunks,
        press.saved_bytes, press.forward_seconds, press.host_bandwidth, press.d2d_bandwidth,
        capacity, overlap=False,  # the runner copies on the compute thread/stream
        boundaries=press.boundaries, shared=press.shared, work=press.backward_bytes,
        params=[layer.param_bytes for layer in profile.model.layers],
        transients=press.backward_transients, forward_peaks=press.forward_transients,
        swap_seconds=press.swap_seconds, recompute_peaks=press.recompute_transients,
        parallel=_parallel(profile), segment_bytes=press.segment_bytes,
        recompute_seconds=press.recompute_seconds))


def _parallel(profile: Profile) -> int:
    """How many stage processes run at once: on the CPU the cores ``profile --press`` saw
    over each stage's intra-op threads (stage processes share the cores); on CUDA the GPUs
    the stages ran on (``PressStats.gpus``: processes sharing a GPU take turns on it); 0
    (all of them) where neither was recorded (older files)."""
    if profile.setup.device == "cuda":
        return max(0, int(profile.press.gpus or 0))
    cores = profile.press.cores
    if not cores:
        return 0
    return max(1, cores // max(1, profile.setup.threads))


def check_profile(profile: Profile) -> None:
    """Refuse a profile a plan cannot be made from, naming what to run instead."""
    if profile.press is None:
        raise McapError(f"the profile of {profile.model.spec} has no MPress statistics (saved "
                        "activation bytes, forward times, bandwidths); add them with "
                        "`python -m mcap profile ... --checkpoint never --press`")
    if profile.setup.checkpoint != "never":
        raise McapError(f"the profile was measured with checkpoint {profile.setup.checkpoint!r}: "
                        "its stages already recompute their activations, so a per-layer plan "
                        "does not describe them; profile with --checkpoint never")


def problem_from(*args, **kwargs) -> Problem:
    """``build(PressNumbers(*args, **kwargs))``: the problem from bare numbers given as the
    fields of :class:`PressNumbers`, in its order (tests, benchmarks)."""
    return build(PressNumbers(*args, **kwargs))


def build(n: PressNumbers) -> Problem:
    """The :class:`Problem` of these numbers: checked (:func:`_check`), each layer's pins
    (:func:`pins`) and the time each action adds (:func:`_action_costs`), each stage's
    keep-all events (``events.py``)."""
    balance = tuple(int(b) for b in n.balance)
    _check(n, balance)
    pin_in, pin_out, seg = pins(balance, n.saved, n.boundaries)
    live = live_intervals(balance, n.schedule, n.chunks, n.forward)
    if not n.overlap:
        live = tuple(tuple(0.0 for _ in per) for per in live)
    costs = _action_costs(n, pin_in, pin_out, live)
    shared = tuple((int(o), int(k), int(b)) for o, k, b in n.shared
                   if 0 <= o < k < len(n.saved) and _same_stage(balance, o, k))
    saved = tuple(int(x) for x in n.saved)
    work = tuple(int(x) for x in n.work)
    params = tuple(int(x) for x in n.params)
    transients = tuple(tuple(int(x) for x in t) for t in n.transients)
    forward_peaks = tuple(tuple(int(x) for x in t) for t in n.forward_peaks)
    recompute_peaks = tuple(tuple(int(x) for x in t) for t in n.recompute_peaks)
    events = tuple(_events(balance, n.schedule, n.chunks, saved, work, params, transients,
                           forward_peaks, n.boundaries))
    return Problem(n.model, balance, tuple(int(b) for b in n.base),
                   _in_flight(n.schedule, len(balance), n.chunks), saved,
                   tuple(float(x) for x in n.forward), n.chunks, costs,
                   tuple(min(x) for x in live), n.capacity,
                   tuple(int(a + b) for a, b in zip(pin_in, pin_out)), seg, shared, work,
                   params, transients, forward_peaks, recompute_peaks, n.schedule,
                   max(0, int(n.parallel)), max(0, int(n.segment_bytes)), events)


def _check(n: PressNumbers, balance: tuple[int, ...]) -> None:
    """Refuse numbers of the wrong count or shape for the layers, naming them."""
    saved = n.saved
    if len(saved) != sum(balance) or len(n.forward) != sum(balance):
        raise McapError(f"{len(saved)} saved sizes and {len(n.forward)} forward times for "
                        f"{sum(balance)} layers (balance {','.join(map(str, balance))})")
    if len(n.base) != len(balance):
        raise McapError(f"{len(n.base)} stage peaks for {len(balance)} stages")
    if n.work and len(n.work) != len(saved):
        raise McapError(f"{len(n.work)} backward sizes for {len(saved)} layers")
    if n.params and len(n.params) != len(saved):
        raise McapError(f"{len(n.params)} parameter sizes for {len(saved)} layers")
    if n.transients and (len(n.transients) != len(saved)
                         or any(len(t) != 3 for t in n.transients)):
        raise McapError(f"{len(n.transients)} backward transients for {len(saved)} layers "
                        "(expected one (first, accumulate, swapped) triple per layer)")
    if n.recompute_peaks and (len(n.recompute_peaks) != len(saved)
                              or any(len(t) != 2 for t in n.recompute_peaks)):
        raise McapError(f"{len(n.recompute_peaks)} recompute transients for {len(saved)} "
                        "layers (expected one (forward, backward) pair per layer)")
    if n.swap_seconds and len(n.swap_seconds) != len(saved):
        raise McapError(f"{len(n.swap_seconds)} swap times for {len(saved)} layers")
    if n.recompute_seconds and len(n.recompute_seconds) != len(saved):
        raise McapError(f"{len(n.recompute_seconds)} recompute times for {len(saved)} layers")
    if n.forward_peaks and (len(n.forward_peaks) != len(saved)
                            or any(len(t) != 2 for t in n.forward_peaks)):
        raise McapError(f"{len(n.forward_peaks)} forward transients for {len(saved)} layers "
                        "(expected one (keep, swapped) pair per layer)")
    if not (n.host_bandwidth > 0 and n.d2d_bandwidth > 0):
        raise McapError(f"bandwidths must be > 0 bytes/s, got host {n.host_bandwidth!r}, "
                        f"d2d {n.d2d_bandwidth!r}")


def _action_costs(n: PressNumbers, pin_in, pin_out, live) -> tuple[dict, ...]:
    """Per layer: the seconds per iteration recompute, swap and d2d add (``model.py``'s
    docstring, **Time**)."""
    # A swap moves the movable bytes out and back; a pinned output is copied out once and
    # its copy dropped when the forward returns (mcap.runner.press.apply), a pinned input never.
    saved = n.saved
    moved = [saved[l] - pin_in[l] - pin_out[l] for l in range(len(saved))]
    again = n.recompute_seconds or n.forward  # measured, else the forward alone (older files)
    return tuple({"recompute": again[l] * n.chunks,
                  "swap": _penalty(_transfer(moved[l] + pin_out[l] / 2, n.host_bandwidth,
                                             n.host_bandwidth, n.swap_seconds, l), live[l]),
                  "d2d": _penalty(_transfer(moved[l] + pin_out[l] / 2, n.d2d_bandwidth,
                                            n.host_bandwidth, n.swap_seconds, l), live[l])}
                 for l in range(len(saved)))


def _events(balance, schedule, chunks, saved, work, params, transients, forward_peaks,
            boundaries):
    """Each stage's keep-all events (events.py)."""
    for s, (a, z) in enumerate(windows(balance)):
        yield _window_events(schedule, chunks, s, len(balance), a, z, saved, work, params,
                             transients, forward_peaks, boundaries)


def _window_events(schedule, chunks, s, G, a, z, saved, work, params, transients,
                   forward_peaks, boundaries):
    """The events of layers a..z as stage s of G. The stage's input lives in the schedule's
    receive buffers (or the batch) for the whole iteration, so the bytes of it a layer
    saves are taken out of that layer's varying bytes; the sizes of the tensors passed
    between layers give the gradients the schedule keeps and those a backward receives
    (``events.stage_events``); they only help locate the peak.
    Without measured transients a backward holds its parameters' size (a new or an
    accumulated gradient) plus its working bytes (``backward_bytes``)."""
    varying = list(saved[a:z + 1])
    held_out = grad_in = 0
    grad_out = []
    if boundaries:
        for o, n in boundaries[a]:
            if a <= o <= z:
                varying[o - a] -= min(n, varying[o - a])
        held_out = sum(n for o, n in boundaries[z + 1] if not a <= o <= z)
        if s == G - 1:  # the model's output, kept for the loss (events.stage_events)
            held_out = sum(n for _, n in boundaries[z + 1])
        grad_in = sum(n for _, n in boundaries[a]) if s > 0 else 0
        grad_out = [sum(n for _, n in boundaries[l + 1]) if l < z or s == G - 1 else 0
                    for l in range(a, z + 1)]
    layers = range(a, z + 1)
    if transients:
        first = [transients[l][0] for l in layers]
        accum = [transients[l][1] for l in layers]
    else:
        first = accum = [(params[l] if params else 0) + (work[l] if work else 0) for l in layers]
    # a forward's measured peak is above its start, where its input already lives: the
    # part of that input the layer owns (its saved bytes count it) is added back
    fwd = [forward_peaks[l][0] + (sum(n for o, n in boundaries[l] if o == l)
                                  if boundaries and l > a else 0) for l in layers] \
        if forward_peaks else ()
    return stage_events(schedule, s, G, chunks, a, varying, params[a:z + 1] if params else (),
                        first, accum, fwd, held_out, grad_in, grad_out, s == G - 1)


def swap_back(movable: int, transient: Optional[Sequence[int]]) -> int:
    """How much of a swapped layer's ``movable`` bytes is back at the height of its own
    backward: all of it, or with its measured ``(first, accumulate, swapped)`` backward
    transients what the swapped backward holds beyond the kept one (storages come back as
    backward needs them), at most ``movable``."""
    if transient is None:
        return movable
    return min(movable, max(0, transient[2] - transient[1]))


def _same_stage(balance, a: int, b: int) -> bool:
    return any(lo <= a and b <= hi for lo, hi in windows(balance))


def pins(balance: Sequence[int], saved: Sequence[int], boundaries: Sequence):
    """Per layer: bytes pinned as its stage's input, as its stage's output (both capped at
    the layer's ``saved``), and the (owner, bytes) passed into it from its own stage (what a
    recompute segment starting there pins). Module docstring, pinned bytes."""
    L = len(saved)
    pin_in, pin_out, seg = [0] * L, [0] * L, [()] * L
    if not boundaries:
        return pin_in, pin_out, tuple(seg)
    if len(boundaries) != L + 1:
        raise McapError(f"{len(boundaries)} boundaries for {L} layers (expected {L + 1})")
    for a, z in windows(balance):
        for b, side in ((a, pin_in), (z + 1, pin_out)):
            for owner, nbytes in boundaries[b]:
                if a <= owner <= z:
                    side[owner] += nbytes
        for i in range(a + 1, z + 1):
            seg[i] = tuple((o, n) for o, n in boundaries[i] if a <= o <= z or o == -1)
    for l in range(L):
        pin_in[l] = min(pin_in[l], saved[l])
        pin_out[l] = min(pin_out[l], saved[l] - pin_in[l])
    return pin_in, pin_out, tuple(seg)


def _in_flight(schedule: str, stages: int, chunks: int) -> tuple[int, ...]:
    """Per stage, the most micro-batches forwarded and not yet backward at once, counted
    along the schedule's op order (torch's, ``mcap.core.stagetime.op_order``)."""
    out = []
    for ops in op_order(schedule, stages, chunks):
        now = most = 0
        for kind, _ in ops:
            now += 1 if kind == "F" else -1
            most = max(most, now)
        out.append(most)
    return tuple(out)
