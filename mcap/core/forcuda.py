"""Planning for a GPU from a CPU profile (issue 30): ``predict`` / ``recommend --for cuda``.
Pure: no torch, no files.

A CPU profile measures the bytes of every tensor a stage holds, and a CUDA stage holds the
same activations, weights, gradients and optimizer state (mCAP 3.2). What differs, each
from PyTorch's own code, none fitted to a GPU's measurements:

* **Library workspaces, once per stage process.** cuBLAS gets a workspace per handle
  through the caching allocator at a thread's first matrix multiply
  (``CublasHandlePool.cpp``: ``parseChosenWorkspaceSize`` is ``:4096:8`` = 32 MiB on sm_90,
  ``:4096:2:16:8`` = 8 MiB + 128 KiB elsewhere, unless ``CUBLAS_WORKSPACE_CONFIG`` says
  otherwise). A stage multiplies on two threads, the forward's and autograd's backward
  thread, and the forward's ``addmm`` with a bias goes through cuBLASLt, whose own
  workspace is 1 MiB (``parseCUDABlasLtWorkspaceSize``, not unified by default). So a stage
  holding any layer of a kind in :data:`GEMM_KINDS` pays ``2 x cuBLAS + cuBLASLt`` once
  (65 MiB on Hopper; the H200 profile's own fit reads 65.1 MiB:
  bench/log/2026-11-26-gpu-predictors.md).
* **The optimizer step's temporaries.** On CUDA ``torch.optim`` takes the *foreach* path:
  SGD with weight decay makes ``torch._foreach_add(grads, params)``, one new copy of every
  gradient of the stage at once, Adam ``torch._foreach_sqrt(exp_avg_sqs)``, one copy of
  every second moment. On the CPU the per-tensor path makes that copy for one tensor at a
  time (the CPU predictor's max-type term). So at its step a CUDA stage holds
  ``(STATE_COPIES + FOREACH_COPIES) x`` its parameter bytes (weights, gradients, optimizer
  state, the step's copy), and its peak is the larger of that and the backward's peak:
  ``peak = max(backward(a..z), step(a..z)) + workspace``. The backward's is the CPU
  prediction without the CPU-only terms. A stage heavy in weights peaks at the step (VGG11's
  convolutions at 32x32: 4x their weights on the H200), one heavy in activations in the
  backward (GPT's blocks: the H200's mem_added of a block is the CPU's to the byte).
* **CPU-only temporaries.** The CPU predictor's max-type terms (oneDNN's convolution
  workspaces, the per-tensor step temporary) and its presence term are left out; the
  middle-stage term (what a pipeline stage forwards) is kept.
* **The allocator's rounding.** The caching allocator hands out blocks that are multiples
  of 512 B (``round_size``: ``kMinBlockSize``; with the default config, no power-of-two
  divisions) and ``max_memory_allocated`` counts blocks. A profile records one parameter
  byte count per layer, not its tensors, so each layer's parameters, gradients, optimizer
  state and step copy are rounded as one block each: a lower bound, short by under 512 B
  per further tensor. Activations are not rounded (their tensors are not recorded).

Not modelled: cuDNN's per-call convolution workspaces (a CPU profile cannot show them; on
the H200 VGG11 profile no max-type term was found for them at 32x32), a large cached block
handed out unsplit (up to 1 MiB more per allocation, depending on the process's history).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import numpy as np

from mcap.core.costs import StageCosts, Term, TermCosts
from mcap.core.errors import McapError
from mcap.core.predict import CostTable
from mcap.core.types import Profile

MiB = 2**20
MIN_BLOCK = 512  # c10::cuda::CUDACachingAllocator kMinBlockSize
CUBLASLT = 1024 * 1024  # parseCUDABlasLtWorkspaceSize: 1024 KiB unless CUBLASLT_WORKSPACE_SIZE
GEMM_THREADS = 2  # the forward's thread and autograd's backward thread
DEFAULT_ARCH = "sm90"  # the GPUs this project measured (H100, H200)
# Layer kinds whose forward and backward run cuBLAS GEMMs: torch.nn's, and mcap's built-in
# models' composite layers that hold nn.Linear (GPT's Block and Head, AmoebaNet's Classify).
GEMM_KINDS = frozenset({"Linear", "LazyLinear", "Bilinear", "MultiheadAttention",
                        "TransformerEncoderLayer", "TransformerDecoderLayer", "Transformer",
                        "Block", "Head", "Classify"})
FOREACH_COPIES = {"sgd": 1, "adam": 1}  # copies of the stage's parameters at the step
STATE_COPIES = {"sgd": 3, "adam": 4}  # weights, gradients, momentum / both moments
LIBRARY = "library workspace, once per stage"
_SIZE = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(B|KiB|MiB|GiB|KB|MB|GB)?")
_UNIT = {None: 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6,
         "GB": 10**9}


def cublas_workspace(arch: str) -> int:
    """torch's default cuBLAS workspace per handle for ``arch`` (module docstring)."""
    return 4096 * 8 * 1024 if arch == "sm90" else 4096 * 1024 * 2 + 16 * 1024 * 8


def stage_workspace(arch: str) -> int:
    """What a stage process holding a GEMM layer pays once on ``arch``."""
    return GEMM_THREADS * cublas_workspace(arch) + CUBLASLT


def round_block(n):
    """The caching allocator's block for a request of ``n`` bytes (0 stays 0)."""
    n = np.asarray(n, dtype=np.int64)
    return np.where(n > 0, np.maximum(MIN_BLOCK, -(-n // MIN_BLOCK) * MIN_BLOCK), 0)


@dataclass(frozen=True)
class Target:
    """Where the prediction is for: ``text`` as given, the architecture when named, the
    bytes a stage holding a layer of ``kinds`` pays once."""
    text: str
    arch: Optional[str]
    workspace: int
    kinds: frozenset = GEMM_KINDS
    source: str = ""  # where the workspace figure comes from, for reports


def parse_target(text: str) -> Target:
    """``cuda`` (= ``cuda:sm90``), ``cuda:smNN`` or ``cuda:SIZE`` (the once-per-stage bytes,
    e.g. ``cuda:65MiB``, ``cuda:0``); anything else raises, naming the value."""
    raw = str(text).strip()
    device, _, rest = raw.partition(":")
    if device != "cuda":
        raise McapError(f"--for {raw!r}: the target must be cuda, cuda:smNN (e.g. cuda:sm90) or "
                        f"cuda:SIZE (the workspace a stage pays once, e.g. cuda:65MiB)")
    rest = rest.strip() or DEFAULT_ARCH
    if re.fullmatch(r"sm[0-9]{2,3}", rest):
        return Target(raw, rest, stage_workspace(rest),
                      source=f"torch's defaults for {rest}: {GEMM_THREADS} x cuBLAS "
                             f"{cublas_workspace(rest)} B + cuBLASLt {CUBLASLT} B")
    m = _SIZE.fullmatch(rest)
    if not m:
        raise McapError(f"--for {raw!r}: {rest!r} is neither an architecture (sm80, sm90, ...) "
                        f"nor a size (65MiB, 68157440)")
    value = float(m.group(1)) * _UNIT[m.group(2)]
    if value > 2**40:
        raise McapError(f"--for {raw!r}: a workspace of {int(value):,} bytes is above 1 TiB")
    return Target(raw, None, int(value), source="given")


def from_gpu_fit(text: str, workspace: int, kinds) -> Target:
    """A target whose workspace and kinds come from a GPU profile's own fit."""
    return Target(text, None, int(workspace), frozenset(kinds), source="the GPU profile's fit")


class CudaCosts(StageCosts):
    """``max(backward, step) + presence term`` (module docstring): not additive."""

    def __init__(self, backward: TermCosts, step: CostTable, terms, predictor: str,
                 details: dict):
        self.backward, self.step, self.terms = backward, step, tuple(terms)
        self.num_layers = step.num_layers
        self.predictor = predictor
        self.details = dict(details)

    def stage_costs(self, first, last):
        first, last = np.asarray(first), np.asarray(last)
        out = np.maximum(self.backward.stage_costs(first, last),
                         self.step.stage_costs(first, last))
        for term in self.terms:
            out = out + term.evaluate(first, last)
        return out


def _additive(per_layer: np.ndarray) -> CostTable:
    return CostTable(iso=per_layer.copy(), prefix=np.concatenate([[0], np.cumsum(per_layer[1:])]))


def step_table(param_bytes, optimizer: str) -> CostTable:
    """What a CUDA stage holds at its optimizer step (module docstring), per stage."""
    copies = STATE_COPIES[optimizer] + FOREACH_COPIES[optimizer]
    return _additive(copies * round_block(np.asarray(param_bytes, dtype=np.int64)))


def for_cuda(costs: StageCosts, profile: Profile, target: Target) -> CudaCosts:
    """``costs`` (a predictor's fit of the CPU ``profile``) translated to a CUDA stage
    process (module docstring)."""
    setup = profile.setup
    if setup.device != "cpu":
        raise McapError(f"--for {target.text}: the profile was measured on {setup.device!r}; "
                        "--for translates a CPU profile (a GPU profile predicts its GPU as is)")
    if setup.optimizer not in FOREACH_COPIES:
        raise McapError(f"--for {target.text}: optimizer {setup.optimizer!r} has no CUDA step "
                        f"model; known: {', '.join(sorted(FOREACH_COPIES))}")
    layers = profile.model.layers
    unknown = [l.name for l in layers if l.param_bytes > 0 and not l.kind]
    if unknown and target.workspace:
        more = f", ... ({len(unknown)} layers)" if len(unknown) > 5 else ""
        raise McapError(f"--for {target.text}: the profile records no kind for layers "
                        f"{', '.join(unknown[:5])}{more}, so which call cuBLAS is unknown; "
                        "re-profile with this mcap, or give the workspace as cuda:0")
    positional = getattr(costs, "inner", None) is not None  # mcap.core.predictors.positional
    if positional:
        # middle and last stages read where they peak on the CPU (an embedding's backward, a
        # head's loss, each with CPU temporaries): left out like the other CPU-only terms
        costs = costs.inner
    if isinstance(costs, TermCosts):
        table, kept = costs.base, tuple(t for t in costs.terms if t.kind == "midfirst")
    elif costs.table is not None:
        table, kept = costs.table, ()
    else:
        raise McapError(f"--for {target.text}: predictor {costs.predictor!r} gives costs that "
                        "are not Listing 1.1 plus terms (e.g. another batch size's line); "
                        "use the profile's own batch size")
    if costs.num_layers != len(layers):
        raise McapError(f"--for {target.text}: the costs have {costs.num_layers} layers but "
                        f"the profile has {len(layers)} (a merged profile cannot be translated)")
    pb = np.asarray([l.param_bytes for l in layers], dtype=np.int64)
    opt = setup.optimizer
    blocks = round_block(pb)
    rounding = _additive(STATE_COPIES[opt] * (blocks - pb))
    backward = TermCosts(CostTable(iso=table.iso + rounding.iso,
                                   prefix=table.prefix + rounding.prefix), kept, "backward")
    step = step_table(pb, opt)
    values = tuple(int(l.kind in target.kinds) for l in layers)
    terms = (Term(LIBRARY, "presence", values, float(target.workspace)),) \
        if target.workspace and any(values) else ()
    details = {"for": target.text, LIBRARY: target.workspace,
               "library workspace from": target.source,
               "paid by": sorted({l.kind for l in layers if l.kind in target.kinds}),
               "step holds parameter bytes x": STATE_COPIES[opt] + FOREACH_COPIES[opt],
               "CPU terms left out": sorted({t.name for t in getattr(costs, "terms", ())
                                             if t.kind != "midfirst"}
                                            | ({"middle and last stages read where they peak"}
                                               if positional else set()))}
    return CudaCosts(backward, step, terms, f"{costs.predictor} for {target.text}", details)
