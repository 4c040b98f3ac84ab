"""The frozen dataclasses that flow through mcap (ARCHITECTURE.md, Style).

Pure: no torch, no files. Memory is always int bytes. JSON forms live in
``mcap.io.jsonio``; nothing here knows about files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional

from mcap.core.machine import Machine

Status = Literal["ok", "oom", "failed"]
# The registered schedules are ``mcap.core.schedules.names()``; these two are the paper's,
# the ones every engine runs (engines torchgpipe and hybrid run GPipe only).
SCHEDULES = ("gpipe", "1f1b")
CHECKPOINTS = ("except_last", "always", "never")
# fp32; bf16-autocast: fp32 parameters, torch.autocast(bfloat16) around forward and
# backward; bf16: bf16 parameters and activations, fp32 master weights and optimizer state
# (torchtitan's mixed precision without FSDP: mcap.runner.precision)
PRECISIONS = ("fp32", "bf16-autocast", "bf16")
OPTIMIZERS = ("sgd", "adam")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Layer:
    """One partitionable layer: its name, its parameter bytes and its kind (the module's
    class name, e.g. "Conv2d"; "" when unknown, as in files written before kinds were
    recorded). The kind is information, not identity: two layers are the same layer
    whatever kind a file says."""
    name: str
    param_bytes: int
    kind: str = field(default="", compare=False)
    # bytes of the layer's output for one micro-batch under the setup it was measured at
    # (what crosses a stage boundary after it); 0 when unknown (files before issue 39)
    out_bytes: int = field(default=0, compare=False)


@dataclass(frozen=True)
class ModelInfo:
    """A model as mcap sees it: its spec string and its top-level layers in order."""
    spec: str
    layers: tuple[Layer, ...]

    @property
    def num_layers(self) -> int:
        return len(self.layers)


@dataclass(frozen=True)
class Setup:
    """Everything about a training run except the partitioning.

    ``device`` is the device kind the stages run on ("cpu" or "cuda"); ``engine`` is the
    pipeline runtime (ARCHITECTURE.md, Words). Files written before the rename call the
    device ``backend``; ``mcap.io.jsonio`` still reads them.

    ``threads`` is the intra-op thread count of every stage process (issue 11): a CPU
    stage's peak depends on it (oneDNN's convolution workspaces grow with the threads), so
    it is fixed, 1 by default, and two machines of the same ISA give the same peaks.

    ``virtual_stages`` (V) is the number of pipeline stages each rank (device) holds under a
    multi-stage schedule (``mcap.core.schedules``): a balance then cuts the layers into
    ``stages * virtual_stages`` chunks, placed on the ranks as the schedule places them.
    ``checkpoint`` is one mode for every stage, or one per chunk, comma-separated
    (``mcap.core.setup.checkpoint_modes``). ``precision`` is one of :data:`PRECISIONS`.

    ``press`` names the MPress plan a measured run applied (``mcap.core.setup.press_code``:
    per layer k keep, r recompute, s swap, d<stage> d2d), "" for none. A plan changes the
    peaks, so its runs are a study of their own and never reused as plain runs of that
    balance; profile and sweep files do not carry it (they are always measured without).
    """
    stages: int
    batch_size: int = 32
    chunks: int = 4
    schedule: str = "gpipe"
    checkpoint: str = "except_last"
    device: str = "cpu"
    capacity_bytes: Optional[int] = None
    engine: str = "pipelining"
    optimizer: str = "sgd"
    threads: int = 1
    press: str = ""
    virtual_stages: int = 1
    precision: str = "fp32"

    @property
    def num_chunks(self) -> int:
        """Entries of a balance under this setup: ranks x stages per rank."""
        return self.stages * self.virtual_stages


@dataclass(frozen=True)
class Partitioning:
    """Layer counts per stage, exactly torchgpipe's ``balance``. Stage i runs on device i."""
    balance: tuple[int, ...]

    @property
    def stages(self) -> int:
        return len(self.balance)

    @property
    def num_layers(self) -> int:
        return sum(self.balance)

    def bounds(self) -> tuple[tuple[int, int], ...]:
        """(first, last) layer index of each stage, inclusive: the one balance -> windows
        computation (``mcap.core.partition.windows`` asks it)."""
        out, start = [], 0
        for n in self.balance:
            out.append((start, start + n - 1))
            start += n
        return tuple(out)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Where a stage's peak went, at the moment of the peak, when the runner records it."""
    weights: int
    gradients: int
    optimizer: int
    other: int  # activations, communication buffers, workspaces


@dataclass(frozen=True)
class StageTimes:
    """A stage measured alone (``mcap.runner.alone``): seconds of each micro-batch's
    forward and backward and of the optimizer step, per iteration, and the bytes of one
    micro-batch's activation it receives and sends (its gradients cross back with the same
    bytes), and per iteration the schedule's other work (``other``). What a partitioning's
    throughput is estimated from (``mcap.core.stagetime``)."""
    forward: tuple[tuple[float, ...], ...]
    backward: tuple[tuple[float, ...], ...]
    step: tuple[float, ...]
    recv_bytes: int = 0
    send_bytes: int = 0
    # per iteration: what the schedule spent beyond the forwards and backwards (its
    # receives and sends, the loss, its own Python); () where not recorded
    other: tuple[float, ...] = ()
    # the measured memory timeline: per event (kind, iteration, micro-batch, bytes before,
    # peak inside, bytes after), kind "F", "B", "S" (optimizer step) or "-" (the
    # schedule's work between them); its highest peak is the stage's; () not recorded
    memory: tuple[tuple, ...] = ()


@dataclass(frozen=True)
class Run:
    """One measured partitioning. A failed or OOM run is a record too (optuna's trial states).

    ``composed``: the per-stage peaks (or the oom) were not measured on this partitioning
    but composed from runs of others holding the same stages (``mcap.core.profiling.cover``); such
    a run's ``seconds`` is 0.

    ``times``: per stage, what a stage run alone recorded (``StageTimes``); None for a run
    whose stages ran together. ``estimated``: ``samples_per_second`` was estimated from
    ``times`` and a measured link (``mcap.core.stagetime``), not timed on a concurrent run
    (where the data flows, the one run whose time is real)."""
    balance: tuple[int, ...]
    status: Status
    peaks: Optional[tuple[int, ...]]
    seconds: float
    samples_per_second: Optional[float] = None
    error: Optional[str] = None
    breakdown: Optional[tuple[MemoryBreakdown, ...]] = None
    composed: bool = False
    times: Optional[tuple[StageTimes, ...]] = None
    estimated: bool = False

    @property
    def peak(self) -> Optional[int]:
        return max(self.peaks) if self.peaks else None


@dataclass(frozen=True)
class StageRun:
    """One stage of ``balance`` (index ``stage``) measured alone (``mcap.runner.alone``):
    what a sweep measures once per stage key (``mcap.core.profiling.cover``) and composes every
    partitioning holding that key from. A failure is a record with its status."""
    balance: tuple[int, ...]
    stage: int
    status: Status
    peak: Optional[int]
    seconds: float = 0.0
    times: Optional[StageTimes] = None
    error: Optional[str] = None
    breakdown: Optional[MemoryBreakdown] = None
    # Where it ran (issue 42): the node a cluster executor ran its task on (None: this
    # machine's own pool; a failed task's error names it too, and the store keeps that),
    # and the fingerprint of the machine that measured it, which the driver records it
    # under (None: the runner's). Not part of what it measured.
    node: Optional[str] = field(default=None, compare=False)
    machine: Optional[Machine] = field(default=None, compare=False)


@dataclass(frozen=True)
class LayerStats:
    """mCAP's per-layer statistics (paper 3.1): mem_isolated(l) and mem_added(l).

    ``mem_added[0]`` is None: the first layer is never appended to anything.
    """
    mem_isolated: tuple[int, ...]
    mem_added: tuple[Optional[int], ...]

    @property
    def num_layers(self) -> int:
        return len(self.mem_isolated)


@dataclass(frozen=True)
class VariantStats:
    """mCAP statistics profiled under another batch size (CAPTURE III-A2) or another stage
    parallelism (III-A1): ``parallel`` is pp, dp or tp and ``degree`` the devices a stage of
    that kind uses; for dp/tp the statistics are per device (every device of a stage reads
    the same peak). ``runs`` are the profiling runs they came from (peaks per stage, or per
    device for dp/tp runs, in device order)."""
    batch_size: int
    stats: LayerStats
    parallel: str = "pp"
    degree: int = 1
    runs: tuple[Run, ...] = ()

    @property
    def key(self) -> tuple[int, str, int]:
        return (self.batch_size, self.parallel, self.degree)


@dataclass(frozen=True)
class PressStats:
    """What MPress's planner needs (MPress II-III), measured while profiling.

    Per layer: ``saved_bytes``, the bytes of activations the layer saves for backward per
    micro-batch (what recomputing or swapping it frees), and ``forward_seconds``, its
    forward time per micro-batch (what recomputing it costs). Per machine: the measured
    bandwidth in bytes per second of host swap (device to host, and back) and of
    device-to-device transfer between two stages' devices.

    ``boundaries[b]`` (``num_layers + 1`` entries; empty: not measured, older files): the
    storages of the tensor passed from layer ``b - 1`` to layer ``b`` (``b = 0``: the model's
    input, ``b = num_layers``: its output) that some layer saves, as ``(owner, bytes)`` pairs,
    ``owner`` being the layer whose ``saved_bytes`` counts them. A pipeline holds a stage's
    input and output micro-batches until backward whatever a plan says (and a recompute
    segment's checkpoint holds its input), so these bytes cannot be freed when ``b`` is such
    a boundary (``mcap.core.press.model``); owner ``-1``: a passed tensor no layer saves.
    ``shared``: ``(owner, last, bytes)`` triples, storages ``owner`` saves first that later
    layers up to ``last`` save too (recomputing ``owner`` alone does not free them).
    ``backward_bytes[l]`` (empty: not measured, older files): the most bytes layer ``l``'s
    backward allocates beyond what is live when it starts (its input gradients, its
    intermediate gradients, its parameters' gradients), per micro-batch: what a restored
    layer's backward adds on top of its restored bytes (``mcap.core.press.model``).
    ``backward_transients[l]`` (empty: not measured, older files): ``(first, accumulate,
    swapped)``, the most bytes layer ``l``'s backward holds above the level where it starts,
    parameters requiring grad: the first backward of an iteration (its parameters'
    gradients allocated), a later one (added to them), and a later one with every storage
    the layer saves swapped out at its forward and brought back when backward needs it
    (``mcap.runner.press.stats``; where a stage peaks inside its backward,
    ``mcap.core.press.events``). ``forward_transients[l]`` (likewise optional): ``(keep,
    swapped)``, the most bytes its forward holds above its start, kept and swapped."""
    saved_bytes: tuple[int, ...]
    forward_seconds: tuple[float, ...]
    host_bandwidth: float
    d2d_bandwidth: float
    boundaries: tuple[tuple[tuple[int, int], ...], ...] = ()
    shared: tuple[tuple[int, int, int], ...] = ()
    backward_bytes: tuple[int, ...] = ()
    backward_transients: tuple[tuple[int, int, int], ...] = ()
    forward_transients: tuple[tuple[int, int], ...] = ()
    swap_seconds: tuple[float, ...] = ()
    recompute_transients: tuple[tuple[int, int], ...] = ()
    cores: Optional[int] = None  # CPU cores the stage processes share (the time model)
    segment_bytes: int = 0  # what each recompute segment keeps per micro-batch (CPU RNG state)
    # per layer: seconds recomputing it (a one-layer checkpoint segment) adds per
    # micro-batch, measured (empty: older files; the forward time stands in)
    recompute_seconds: tuple[float, ...] = ()
    # CUDA: the GPUs the stage processes ran on (stages sharing one take turns on it: the
    # time model adds their added work up); None on the CPU and in older files
    gpus: Optional[int] = None


@dataclass(frozen=True)
class Profile:
    """A profiled model: statistics plus the runs they came from (``mcap.profile/1``)."""
    model: ModelInfo
    setup: Setup
    stats: LayerStats
    runs: tuple[Run, ...] = ()
    # Unknown top-level JSON keys, kept so a load/save round trip loses nothing.
    extra: Optional[dict] = field(default=None, compare=False, hash=False)
    # Where the runs were measured (mcap.core.machine); None: "machine unknown" (older files).
    machine: Optional[Machine] = None
    # CAPTURE: statistics at other batch sizes / stage parallelisms (empty: mCAP only).
    variants: tuple[VariantStats, ...] = ()
    # MPress: activation bytes, forward times and bandwidths (None: not profiled).
    press: Optional[PressStats] = None

    def variant(self, batch_size: int, parallel: str = "pp", degree: int = 1
                ) -> Optional["VariantStats"]:
        """The statistics profiled at (batch size, parallelism, degree), or None."""
        for v in self.variants:
            if v.key == (batch_size, parallel, degree):
                return v
        return None


@dataclass(frozen=True)
class Sweep:
    """Many measured partitionings, no statistics (``mcap.sweep/1``)."""
    model: ModelInfo
    setup: Setup
    runs: tuple[Run, ...] = ()
    # Unknown top-level JSON keys, kept so a load/save round trip loses nothing.
    extra: Optional[dict] = field(default=None, compare=False, hash=False)
    # Where the runs were measured (mcap.core.machine); None: "machine unknown" (older files).
    machine: Optional[Machine] = None


@dataclass(frozen=True)
class Prediction:
    balance: tuple[int, ...]
    peaks: tuple[int, ...]

    @property
    def peak(self) -> int:
        return max(self.peaks)


@dataclass(frozen=True)
class Recommendation:
    """The result of every search method (one type for all; ARCHITECTURE.md, Records)."""
    method: str
    balance: tuple[int, ...]
    predicted_peaks: tuple[int, ...]
    seconds: float
    evaluated: int
    curve: tuple[int, ...] = field(default=())  # best-so-far predicted peak per evaluation (bo)
    predictor: str = "paper"  # whose stage costs the predicted peaks are (mcap.core.predictors)

    @property
    def predicted_peak(self) -> int:
        return max(self.predicted_peaks)
