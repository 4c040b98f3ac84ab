"""Stages that share one GPU exchange activations and gradients on the device (issue 13,
item 5).

NCCL refuses two ranks on one GPU, and gloo sends only host tensors, so stages sharing a
GPU used to copy every activation and gradient to the host and back (``HostStaged``):
most of a paper-scale run's time was those copies. Here only a one-element *token* per
micro-batch crosses the gloo group (so ``torch.distributed.pipelining``'s schedule, shapes
and ordering stay as they are); the tensors themselves go through a :class:`Link`:

* ``ipc`` (CUDA): the sender publishes CUDA IPC handles
  (``torch.multiprocessing.reductions.reduce_tensor``) in the process group's store; the
  receiver opens them and copies the bytes into its own receive buffer on the GPU, which
  its caching allocator counts, then acknowledges. Each stage's memory stays its own: the
  sender holds its output until its backward (as with NCCL, where the output stays in the
  stage's forward cache); the receiver keeps one buffer per micro-batch and direction for
  the run, as ``torch.distributed.pipelining`` keeps its receive buffers. On CPU stage
  processes (``store``) the peaks read 0.8-5% below the process-group path's on small GPT
  and AmoebaNet stages (1F1B and GPipe), which allocates a little more around its sends.
* ``store`` (any device): the tensors' bytes themselves go through the store
  (``torch.save`` / ``torch.load(weights_only=True)``). Slow, but it runs the same
  token and autograd logic on CPU stage processes, which is how it is tested here.

The token's value is the micro-batch's sequence number on that boundary, so the
receiver knows which tensors to fetch; its gradient carries the same number back.

What the concurrent run holds must be what a stage run alone holds (issue 25: a stage's
truth is its own memory in a real run, ``mcap.runner.alone``), and on one H200 the ``ipc``
path read stage 0 of the paper's VGG11 setup at 2.1x its ``host`` peak:

- **the runtime's lifetimes.** An activation or gradient a stage publishes for its
  neighbour lives as long as the send work of its token (:func:`attach`), as the tensor of
  a real send lives as long as its work: ``torch.distributed.pipelining`` keeps a step's
  send works in a list until the step returns (GPipe: every forward's output stays held
  through the whole backward phase), and gloo's works own the tensors they send;
- **CUDA IPC's limbo.** A block another process has opened is not freed when the producer
  drops it: it waits in torch's limbo list (counted by the caching allocator) until the
  consumer has released it and the producer calls ``torch.cuda.ipc_collect()``. The
  consumer copies into its own buffer and drops the handle before it acknowledges; the
  producer collects (:func:`collect`) before each of its forwards and backwards, when it
  reclaims what was acknowledged, and after each step;
- **one process, both ends.** A handle cannot be opened in the process that made it (CUDA
  13: ``invalid device context``), so a link whose two ends live in one process takes the
  tensors from this process's own table (how the exchange is tested in one process);
- **the store.** Tokens and handles go through a TCPStore that rank 0 opens (its port
  published once through the process group's FileStore): a FileStore rereads its whole
  file on every operation, hundreds per iteration.
"""
from __future__ import annotations

import io
import os
import pickle
import time
from typing import Optional, Sequence

import torch
from torch import nn

# how stages exchange, chosen without torch (mcap.runner.exchangemode: the parent asks it)
from mcap.runner.exchangemode import MODES, mode  # noqa: E402,F401  (re-exported)
ACK_SECONDS = 300.0  # how long a stage waits, at the end of a run, for its peer's copies

_run_id = 0  # the pool's id of the run in progress (set_run); keys are unique per run


def set_run(run_id: int) -> None:
    """Called by the stage worker with each job's id, which every stage of the run shares
    (a counter of its own would drift when only some workers restart after an oom)."""
    global _run_id
    _run_id = run_id


_tcp = None  # this process's TCPStore client for the exchange (see the module docstring)
_local: dict = {}  # key -> tensors published by this process (both ends in one process)
_attached: list = []  # tensors the next token send of this process owns (attach)
_holds = False


def _default_store():
    """The exchange's store: a TCPStore opened by rank 0 of the process group, whose port
    the others read from the group's own store; once per process."""
    global _tcp
    if _tcp is not None:
        return _tcp
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    group_store = c10d._get_default_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        _tcp = dist.TCPStore("127.0.0.1", 0, world, is_master=True, wait_for_workers=False)
        group_store.set("mcap-x/port", str(_tcp.port))
    else:
        port = int(group_store.get("mcap-x/port").decode())
        _tcp = dist.TCPStore("127.0.0.1", port, world, is_master=False)
    return _tcp


def collect() -> None:
    """Free this process's CUDA blocks whose consumers have let go (IPC limbo)."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.ipc_collect()


def attach(tensors) -> None:
    """The next token this process sends owns ``tensors`` (module docstring); nothing
    without a process group (both ends in one process send no tokens)."""
    import torch.distributed as dist
    if not dist.is_initialized():
        return
    _hold_sends()
    _attached.extend(t for t in tensors if t is not None)


def _hold_sends() -> None:
    """Patch (once) the making of a send so it takes what :func:`attach` left: the
    schedule builds a ``P2POp`` for each send and keeps it (1F1B: until the next forward),
    then runs it and keeps its work (GPipe: until the step returns), so the tensors ride on
    the send's own tensor object, which both hold; a bare ``isend`` takes them too."""
    global _holds
    if _holds:
        return
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    from mcap.runner.alone import Held

    original_isend, original_init = c10d.isend, c10d.P2POp.__init__

    def init(self, op, tensor, *args, **kwargs):
        original_init(self, op, tensor, *args, **kwargs)
        if op is isend and _attached:
            tensor._mcap_keep = tuple(_attached)
            _attached.clear()

    def isend(tensor, *args, **kwargs):
        work = original_isend(tensor, *args, **kwargs)
        if _attached:
            tensor._mcap_keep = tuple(_attached)
            _attached.clear()
        return Held(work, tensor) if hasattr(tensor, "_mcap_keep") else work

    c10d.P2POp.__init__ = init
    for module in (dist, c10d):
        module.isend = isend
    _holds = True


class Link:
    """One stage's ends of its two boundaries for one run: publish tensors under a key,
    fetch a peer's tensors as this process's own copies, and keep what it published
    alive until the peer acknowledged its copy."""

    def __init__(self, kind: str, device: torch.device, store=None, chunks: int = 1):
        self.kind, self.device, self.chunks = kind, device, max(1, chunks)
        self.store = store if store is not None else _default_store()
        self.prefix = f"mcap-x/{_run_id}/"
        self.pending: dict[str, object] = {}
        self.ending: list = []  # outputs whose backward runs now (released when it returns)
        # Receive buffers, one per micro-batch slot and direction, kept for the run as
        # torch.distributed.pipelining keeps its receive buffers (allocated for every
        # micro-batch on the first step): the same bytes are counted as on separate GPUs.
        self.buffers: dict[tuple, list] = {}

    # --- keys: boundary b is between stage b and b + 1; f forward, b backward --------
    def key(self, boundary: int, direction: str, seq: int) -> str:
        return f"{self.prefix}{boundary}/{direction}/{seq}"

    def publish(self, key: str, tensors: Sequence[Optional[torch.Tensor]]) -> None:
        self.reclaim()
        if self.kind == "ipc":
            from torch.multiprocessing.reductions import reduce_tensor
            # The producing kernels must have finished before another process reads.
            torch.cuda.current_stream(self.device).synchronize()
            _local[key] = tuple(tensors)
            payload = pickle.dumps((os.getpid(), [None if t is None else
                                                  reduce_tensor(t.detach())[1]
                                                  for t in tensors]))
        else:
            buf = io.BytesIO()
            torch.save([None if t is None else t.detach() for t in tensors], buf)
            payload = buf.getvalue()
        self.pending[key] = tuple(tensors)  # until the peer's copy is made
        self.store.set(key, payload)

    def _into(self, slot: tuple, i: int, src: torch.Tensor) -> torch.Tensor:
        """``src`` copied into this process's receive buffer ``i`` of ``slot``."""
        bufs = self.buffers.setdefault(slot, [])
        while len(bufs) <= i:
            bufs.append(None)
        buf = bufs[i]
        if buf is None or buf.shape != src.shape or buf.dtype != src.dtype:
            buf = bufs[i] = torch.empty(src.shape, dtype=src.dtype, device=self.device)
        buf.copy_(src)
        return buf

    def fetch(self, key: str, slot: tuple) -> list[Optional[torch.Tensor]]:
        """The tensors published under ``key``, copied into the receive buffers of
        ``slot`` (boundary, direction, micro-batch slot)."""
        payload = self.store.get(key)  # blocks until published (the store's timeout)
        if self.kind == "ipc":
            from torch.multiprocessing.reductions import rebuild_cuda_tensor
            pid, handles = pickle.loads(payload)
            if pid == os.getpid():  # both ends here: a handle cannot be opened where made
                received = list(_local[key])
            else:  # from a sibling stage process
                received = [None if args is None else rebuild_cuda_tensor(*args)
                            for args in handles]
        else:
            received = torch.load(io.BytesIO(payload), weights_only=True)
        out = [None if t is None else self._into(slot, i, t.detach())
               for i, t in enumerate(received)]
        del received  # the peer's memory (IPC) or the decoded copy
        if self.kind == "ipc":
            torch.cuda.current_stream(self.device).synchronize()  # copied before the ack
        self.store.delete_key(key)
        self.store.set(key + "/ack", b"1")
        self.reclaim()
        return out

    def reclaim(self, wait: bool = False) -> None:
        """Drop what the peers have copied; with ``wait``, wait for every copy."""
        deadline = time.monotonic() + ACK_SECONDS
        while self.pending:
            done = [k for k in self.pending if self.store.check([k + "/ack"])]
            for k in done:
                del self.pending[k]
                _local.pop(k, None)
                self.store.delete_key(k + "/ack")
            if done and self.kind == "ipc":
                collect()
            if not wait or not self.pending:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"exchange: no copy of {sorted(self.pending)} within "
                                   f"{ACK_SECONDS:.0f} s")
            time.sleep(0.001)

    def close(self) -> None:
        for k in self.pending:
            _local.pop(k, None)
        self.pending.clear()
        self.buffers.clear()
        _attached.clear()
        if self.kind == "ipc":
            collect()


def token_meta(requires_grad: bool) -> torch.Tensor:
    """What crosses the process group per micro-batch instead of the tensors."""
    return torch.empty(1, device="meta").requires_grad_(requires_grad)


class _Send(torch.autograd.Function):
    """Sender: publish the stage's output, return the token; in backward, fetch the
    gradient the receiver published under the token's number."""

    @staticmethod
    def forward(ctx, link, boundary, seq, *tensors):
        ctx.link, ctx.boundary, ctx.seq = link, boundary, seq
        ctx.keep = tensors  # the output lives in this stage until its backward (as with NCCL)
        link.publish(link.key(boundary, "f", seq), tensors)
        attach(tensors)  # ... and as long as the send of its token, as a real send's work
        return torch.full((1,), float(seq))

    @staticmethod
    def backward(ctx, grad_token):
        seq = int(grad_token.reshape(-1)[0].item())
        if seq != ctx.seq:
            raise RuntimeError(f"exchange: gradient of micro-batch {seq} for {ctx.seq}")
        if ctx.link.kind == "ipc":
            collect()  # what earlier backwards let go of, before this one allocates
        grads = ctx.link.fetch(ctx.link.key(ctx.boundary, "b", seq),
                               (ctx.boundary, "b", seq % ctx.link.chunks))
        # The runtime holds a stage's output (its forward cache entry) until the stage's
        # backward of that micro-batch returns: Exchanged.hold_through_backward lets go.
        ctx.link.ending.append(ctx.keep)
        ctx.keep = None
        return (None, None, None, *grads)


class _Recv(torch.autograd.Function):
    """Receiver: fetch the tensors the token names; in backward, publish their gradients
    and send the number back as the token's gradient."""

    @staticmethod
    def forward(ctx, link, boundary, token):
        seq = int(token.reshape(-1)[0].item())
        ctx.link, ctx.boundary, ctx.seq = link, boundary, seq
        got = link.fetch(link.key(boundary, "f", seq), (boundary, "f", seq % link.chunks))
        out = tuple(t.view_as(t) for t in got)  # views: the buffers stay the stage's own
        ctx.mark_non_differentiable(*(t for t in out if not t.is_floating_point()))
        return out

    @staticmethod
    def backward(ctx, *grads):
        ctx.link.publish(ctx.link.key(ctx.boundary, "b", ctx.seq), grads)
        attach(grads)  # held as long as the runtime holds the send of the token's gradient
        return None, None, torch.full((1,), float(ctx.seq))


class Exchanged(nn.Module):
    """A stage module whose neighbours are reached through a :class:`Link`: the first
    stage takes the batch from the host, the last returns its output for the loss, every
    other boundary passes a token (module docstring)."""

    def __init__(self, inner: nn.Module, link: Link, rank: int, first: bool, last: bool):
        super().__init__()
        self.inner, self.link, self.rank = inner, link, rank
        self.first, self.last = first, last
        self.sent = 0

    def forward(self, *args):
        if self.link.kind == "ipc":
            collect()  # what earlier steps let go of, before this forward allocates
        if self.first:
            xs = tuple(a.to(self.link.device) for a in args)
        else:
            (token,) = args
            xs = _Recv.apply(self.link, self.rank - 1, token)
        out = self.inner(*xs)
        if self.last:
            return out
        outs = out if isinstance(out, tuple) else (out,)
        seq, self.sent = self.sent, self.sent + 1
        return _Send.apply(self.link, self.rank, seq, *outs)

    def finish(self) -> None:
        """After the schedule: wait until the neighbours copied what this stage published."""
        self.link.reclaim(wait=True)

    def hold_through_backward(self, stage) -> None:
        """Keep each output until ``stage.backward_one_chunk`` of its micro-batch returns,
        as ``torch.distributed.pipelining`` keeps it in its forward cache (1F1B frees
        outputs in backward, where no send work holds them any more)."""
        backward = stage.backward_one_chunk

        def backward_one_chunk(*args, **kwargs):
            try:
                return backward(*args, **kwargs)
            finally:
                self.link.ending.clear()

        stage.backward_one_chunk = backward_one_chunk


__all__ = ["Exchanged", "Link", "MODES", "attach", "collect", "mode", "set_run", "token_meta"]
