"""The machine a peak was measured on, and what a different machine does to peaks (issue 11).

A measured peak is a fact about one model, one setup *and one machine*: on the CPU,
oneDNN's convolution backward allocates a workspace of about (1 + 4 x threads) x the
layer's weight bytes, with kernels chosen by the CPU's ISA; on a GPU, cuBLAS / cuBLASLt
allocate a workspace per thread that runs matmuls whose size depends on the GPU
architecture (32 MiB on Hopper, 8 MiB + 128 KiB before, torch's
``parseChosenWorkspaceSize``), and every torch / CUDA release may change kernels and
workspaces. So every profile, sweep and stored run carries a :class:`Machine`, runs are
reused only under the same :meth:`Machine.key`, and :func:`differences` says what differs
between two machines and what that does to their peaks.

Pure: no torch, no files. ``mcap.runner.machine.collect`` fills it in a stage process.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from typing import Optional

UNKNOWN = "machine unknown"  # the label of a file or run recorded without a fingerprint


@dataclass(frozen=True)
class Machine:
    """Everything about the machine that a stage's peak may depend on.

    ``device`` is the device kind the peaks were measured on ("cpu" or "cuda"); ``cpu`` the
    CPU model, ``isa`` torch's CPU capability (``torch.backends.cpu.get_cpu_capability()``:
    "AVX2", "AVX512", ...), ``threads`` the stage processes' intra-op threads; ``torch``,
    ``torch_git`` and ``cuda`` the torch build; ``gpu`` and ``driver`` the GPU(s) the stages
    ran on and the NVIDIA driver (None on the CPU).
    """
    device: str
    cpu: str
    isa: str
    threads: int
    torch: str
    torch_git: Optional[str] = None
    cuda: Optional[str] = None
    gpu: Optional[str] = None
    driver: Optional[str] = None
    # How the peaks were read (issue 25): on the CPU the tracker's version ("memtrack/2":
    # storages made by copy.deepcopy counted, which version 1 missed), on CUDA whether
    # each stage ran alone ("cuda/alone") or with its neighbours and how they exchanged
    # ("cuda/pipeline-ipc", ...). None: recorded before the field existed.
    meter: Optional[str] = None

    def key(self) -> str:
        """A stable short text that identifies this fingerprint (the store's run key).

        Only fields that are set enter it, so a field added later with default None
        leaves the keys of machines recorded before unchanged."""
        fields = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        text = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def describe(self) -> str:
        """One line: what the peaks were measured on."""
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}"
        host = f"{self.cpu} ({self.isa}, {threads})"
        build = f"torch {self.torch}"
        if self.meter and self.device == "cuda":
            build += f", {self.meter.split('/', 1)[-1]}"
        if self.device == "cuda":
            gpu = self.gpu or "unknown GPU"
            cuda = f", CUDA {self.cuda}" if self.cuda else ""
            driver = f", driver {self.driver}" if self.driver else ""
            return f"{gpu}{cuda}{driver}, {build}; host {host}"
        return f"{host}, {build}"


def describe(machine: Optional[Machine]) -> str:
    """``machine.describe()``, or "machine unknown" for files and runs recorded without one."""
    return UNKNOWN if machine is None else machine.describe()


@dataclass(frozen=True)
class Difference:
    """One field in which two machines differ, and what that does to peaks."""
    field: str
    a: object
    b: object
    effect: str
    changes_peaks: bool  # False: recorded for completeness, peaks of this device stay

    def describe(self) -> str:
        return f"{self.field} {self.a!r} vs {self.b!r}: {self.effect}"


# What each field does to the peaks of one device kind, and roughly how much (issue 11 and
# the measurements in the report that introduced this module).
_CPU_EFFECTS = {
    "isa": (True, "CPU peaks depend on the ISA: oneDNN picks other convolution kernels and "
                  "workspaces (stages holding convolutions differ, tens of MB on VGG11)"),
    "threads": (True, "CPU peaks depend on the intra-op threads: oneDNN's convolution "
                      "backward workspace is about (1 + 4 x threads) x the layer's weight "
                      "bytes"),
    "torch": (True, "another torch release may change kernels and workspaces: peaks may "
                    "differ by any amount; re-measure"),
    "torch_git": (True, "another torch build may change kernels and workspaces"),
    "cpu": (False, "another CPU model of the same ISA: peaks are expected to match when ISA "
                   "and threads match"),
    "cuda": (False, "the torch build's CUDA version does not change CPU peaks"),
    "gpu": (False, "the GPU does not change CPU peaks"),
    "driver": (False, "the GPU driver does not change CPU peaks"),
    "meter": (True, "another version of the CPU tracker: version 1 missed storages made by "
                    "copy.deepcopy (BatchNorm's running statistics: up to 84 KB per "
                    "AmoebaNet-D stage); models without such buffers read the same"),
}
_GPU_EFFECTS = {
    "gpu": (True, "GPU peaks depend on the GPU: cuBLAS / cuBLASLt workspaces differ per "
                  "architecture (32 MiB per matmul thread on Hopper, about 8 MiB before) "
                  "and so do cuDNN's kernels"),
    "cuda": (True, "GPU peaks depend on the CUDA version (library kernels and workspaces)"),
    "driver": (False, "the driver alone does not change allocated bytes; kernels come with "
                      "the CUDA libraries"),
    "torch": (True, "another torch release may change kernels, workspaces and the caching "
                    "allocator's rounding: peaks may differ by any amount; re-measure"),
    "torch_git": (True, "another torch build may change kernels and workspaces"),
    "isa": (False, "the host CPU does not change GPU peaks"),
    "cpu": (False, "the host CPU does not change GPU peaks"),
    "threads": (False, "host threads do not change GPU peaks"),
    "meter": (True, "stages read alone and stages read while sharing a GPU with their "
                    "neighbours differ: with CUDA IPC a producer's block waits for its "
                    "consumer and the producer's allocator counts it (2.1x on stage 0 of "
                    "VGG11 at the paper's scale on an H200)"),
}


def differences(a: Machine, b: Machine) -> tuple[Difference, ...]:
    """Every field in which ``a`` and ``b`` differ, each with what it does to peaks.

    Peaks of different device kinds are different quantities (a CPU stage process's tensor
    bytes vs a GPU's allocated bytes; on VGG11 they rank partitionings with Spearman 0.69),
    so a device difference is reported alone."""
    if a.device != b.device:
        return (Difference("device", a.device, b.device,
                           "CPU and GPU peaks are different quantities: they rank "
                           "partitionings differently and are not comparable", True),)
    effects = _GPU_EFFECTS if a.device == "cuda" else _CPU_EFFECTS
    out = []
    for f in dataclasses.fields(Machine):
        if f.name == "device":
            continue
        va, vb = getattr(a, f.name), getattr(b, f.name)
        if va != vb:
            changes, effect = effects.get(f.name, (True, "may change peaks"))
            out.append(Difference(f.name, va, vb, effect, changes))
    return tuple(out)


def mismatch(a: Optional[Machine], b: Optional[Machine], names: tuple[str, str] =
             ("profile", "sweep")) -> Optional[str]:
    """A warning when ``a`` and ``b`` are known to be different machines whose peaks may
    differ, naming both and saying how; None when they match, when what differs does not
    change peaks, or when either is unknown (older files carry no fingerprint)."""
    if a is None or b is None or a.key() == b.key():
        return None
    diffs = [d for d in differences(a, b) if d.changes_peaks]
    if not diffs:
        return None
    return (f"the {names[0]} and the {names[1]} were measured on different machines "
            f"({names[0]}: {a.describe()}; {names[1]}: {b.describe()}); "
            + "; ".join(d.describe() for d in diffs))
