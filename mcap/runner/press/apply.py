"""An MPress plan applied inside a stage process (MPress III-C/D; issue 16, item 2).

A stage's layers run through :class:`PressStage` instead of ``train.Recomputed``. Per
micro-batch forward, every tensor autograd saves for backward goes through
``torch.autograd.graph.saved_tensors_hooks``; the plan's action of the layer that saves a
storage *first* in that forward (its **owner**; the same rule ``mcap.runner.press.stats``
uses to attribute ``saved_bytes``, so nothing is counted twice) decides what happens:

* ``keep``: nothing; the storage stays where it is until backward.
* ``recompute``: consecutive recompute layers form one segment run under
  ``torch.utils.checkpoint`` (non-reentrant): only the segment's input is saved, every
  tensor saved inside is dropped and rebuilt by re-running the segment in backward.
* ``swap`` (host swap): the whole storage is copied to host memory after it is saved and
  copied back (a fresh device allocation) when backward first unpacks it. On the CPU the
  host copy is a numpy array: numpy allocates with its own ``malloc``, outside PyTorch's
  CPU allocator, which is what ``mcap.runner.memtrack`` wraps, so the copy is never
  counted, exactly as pinned host memory is not counted by ``max_memory_allocated`` on a
  GPU. The stage's counted memory holds the activation from its creation until its last
  reference in forward is gone (the next layers may still read it), and again from the
  moment it is restored until backward is done with it. On CUDA the copy goes to a pinned
  host buffer with ``non_blocking`` copies on the compute stream (ordered with the kernels
  that read the storage before and after).
* ``d2d``: the storage is moved into the memory of the peer stage ``target``
  (:mod:`mcap.runner.press.d2d`): on the CPU the target stage process receives the bytes
  into a tensor allocated by its own (tracked) allocator, so they count in the target's
  peak for as long as they live there, and hands them back in backward; on CUDA the
  target allocates the buffer on its GPU and the sender copies into it through a CUDA IPC
  handle (peer copy, NVLink where present).

Only storages on the stage's own device are acted on: a CUDA stage's layers also save
small host tensors (flash attention's ``philox_seed`` and ``philox_offset``, CPU scalars
saved by every ``scaled_dot_product_attention`` backward), which no GPU counter counts, so
moving them frees nothing there, and the CUDA copy paths (a d2d channel synchronizes the
source's device) refuse a host tensor (the H200's ``Expected a cuda device, but got:
cpu``, issue 30). They stay where they are, as ``mcap.runner.press.stats`` leaves them out
of ``saved_bytes``.

What no action can free, and so is left in place: the stage's input and output
micro-batches, which the pipeline schedule holds until backward whatever the plan says
(``PipelineStage.fwd_cache``): a storage of the input is never moved, and one of the output
that a layer moved (a ReLU saves its result) is read from the original again and its copy
released as soon as the forward returns. A recompute segment's input is kept by the
checkpoint. Parameters and buffers are saved by reference and never moved (they are not
activations). So a plan frees less than ``PressStats.saved_bytes`` of a stage's first and
last layers say; ``measure --press`` shows how much.
"""
from __future__ import annotations

import weakref
from typing import Optional

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mcap.runner.protocol import PressJob


def _as_bytes(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over the whole storage (no copy)."""
    n = storage.nbytes()
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage, 0, (n,), (1,))


class _Moved:
    """One storage moved out of the stage's memory; restored once when backward first
    needs it, shared by every saved view of it, dropped when the last view is unpacked."""

    def __init__(self, storage: torch.UntypedStorage):
        self.nbytes = storage.nbytes()
        self.device = storage.device
        self.origin = weakref.ref(storage)  # to tell a freed-and-reused address apart
        self.pending = 0
        self._restored: Optional[torch.UntypedStorage] = None

    def storage(self) -> torch.UntypedStorage:
        if self._restored is None:
            self._restored = self._fetch()
        return self._restored

    def unpacked(self) -> None:
        self.pending -= 1
        if self.pending <= 0:
            self._restored = None

    def keep(self, storage: torch.UntypedStorage) -> None:
        """Undo the move: the original stays alive anyway (the schedule holds it), so the
        saved views read it and the copy is released."""
        self._restored = storage
        self._release()

    def _fetch(self) -> torch.UntypedStorage:
        raise NotImplementedError

    def _release(self) -> None:
        raise NotImplementedError


class _HostCopy(_Moved):
    def __init__(self, storage: torch.UntypedStorage):
        super().__init__(storage)
        src = _as_bytes(storage)
        if self.device.type == "cuda":
            self.host = torch.empty(self.nbytes, dtype=torch.uint8, pin_memory=True)
            self.host.copy_(src, non_blocking=True)
        else:
            import numpy as np
            # numpy's own malloc: outside the allocator memtrack counts (module docstring).
            self.array = np.empty(self.nbytes, dtype=np.uint8)
            self.host = torch.from_numpy(self.array)
            self.host.copy_(src)

    def _fetch(self) -> torch.UntypedStorage:
        back = torch.empty(self.nbytes, dtype=torch.uint8, device=self.device)  # counted
        back.copy_(self.host, non_blocking=self.device.type == "cuda")
        self._release()  # swapped in: the host copy is no longer needed
        return back.untyped_storage()

    def _release(self) -> None:
        self.host = self.array = None


class _PeerCopy(_Moved):
    def __init__(self, storage: torch.UntypedStorage, channel, key: int):
        super().__init__(storage)
        self.channel, self.key = channel, key
        channel.put(key, _as_bytes(storage))

    def _fetch(self) -> torch.UntypedStorage:
        back = self.channel.get(self.key, self.nbytes, self.device)
        self.channel = None
        return back.untyped_storage()

    def _release(self) -> None:
        if self.channel is not None:
            self.channel.drop(self.key)
            self.channel = None

    def __del__(self):  # saved but never unpacked (a graph freed without backward)
        try:
            self._release()
        except Exception:
            pass


_KEPT = object()


class Saver:
    """The pack/unpack hooks of one micro-batch's forward through one stage."""

    def __init__(self, stage: "PressStage"):
        self.stage = stage
        self.layer: Optional[int] = None  # local index of the layer running now
        self.records: dict[int, object] = {}  # storage address -> _KEPT or _Moved

    def pack(self, t: torch.Tensor):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key == 0 or key in self.stage.param_keys or not self.stage.holds(t.device):
            return t  # no activation of this device (module docstring)
        rec = self.records.get(key)
        if isinstance(rec, _Moved) and rec.origin() is not storage:
            rec = None  # that storage was freed and its address reused in this forward
        if rec is None:
            rec = self.stage.move(storage, self.layer)
            self.records[key] = rec
        if rec is _KEPT:
            return t
        rec.pending += 1
        return rec, t.dtype, t.storage_offset(), tuple(t.size()), tuple(t.stride())

    @staticmethod
    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        rec, dtype, offset, size, stride = packed
        storage = rec.storage()
        out = torch.empty(0, dtype=dtype, device=rec.device).set_(storage, offset, size, stride)
        rec.unpacked()
        return out


class PressStage(nn.Module):
    """A stage's layers with a plan's per-layer actions (module docstring). Forwards on
    meta tensors (shape inference) or without grad run plainly."""

    def __init__(self, layers: nn.Sequential, actions: list, rank: int, channels=None,
                 device: Optional[torch.device] = None):
        super().__init__()
        if len(actions) != len(layers):
            raise ValueError(f"{len(actions)} actions for a stage of {len(layers)} layers")
        self.layers = layers
        self.actions = [a.action for a in actions]
        self.targets = [a.target for a in actions]
        self.rank = rank
        self.channels = channels  # mcap.runner.press.d2d.Channels, for d2d actions
        # the stage's device: only its storages are moved (None: its input's, at forward)
        self.device = None if device is None else torch.device(device)
        self.param_keys = {t.untyped_storage().data_ptr()
                           for t in list(layers.parameters()) + list(layers.buffers())}
        self._next_key = 0
        # Consecutive recompute layers share one checkpoint segment (MPress III-D: one
        # recomputation of a run of layers also drops the tensors passed between them).
        self.segments: list[tuple[int, int]] = []
        i = 0
        while i < len(layers):
            j = i
            if self.actions[i] == "recompute":
                while j + 1 < len(layers) and self.actions[j + 1] == "recompute":
                    j += 1
            self.segments.append((i, j))
            i = j + 1

    def new_step(self) -> None:  # the same interface as train.Recomputed
        pass

    def holds(self, device: torch.device) -> bool:
        """Whether a storage on ``device`` is the stage's own (what its device counts)."""
        mine = self.device
        if mine is None or device.type == "meta":
            return device.type != "meta"
        return device.type == mine.type and (mine.index is None or device.index == mine.index)

    def move(self, storage: torch.UntypedStorage, layer: Optional[int]):
        action = self.actions[layer] if layer is not None else "keep"
        if action in ("keep", "recompute"):  # recompute: a checkpoint segment's input
            return _KEPT
        if action == "swap":
            return _HostCopy(storage)
        self._next_key += 1
        return _PeerCopy(storage, self.channels.to(self.targets[layer]), self._next_key)

    def _run(self, first: int, last: int, *xs):
        x = xs[0] if len(xs) == 1 else xs
        for i in range(first, last + 1):
            x = self.layers[i](x)
        return x

    def forward(self, *args):
        x = args[0] if len(args) == 1 else args
        if any(isinstance(a, torch.Tensor) and a.is_meta for a in args) \
                or not torch.is_grad_enabled():
            return self.layers(x)
        if self.device is None:
            self.device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        saver = Saver(self)
        # The schedule holds the stage's input until backward (PipelineStage.fwd_cache): a
        # copy of it would free nothing, so it stays (module docstring).
        for a in args:
            if isinstance(a, torch.Tensor):
                saver.records[a.untyped_storage().data_ptr()] = _KEPT
        with torch.autograd.graph.saved_tensors_hooks(saver.pack, saver.unpack):
            for first, last in self.segments:
                saver.layer = first
                xs = x if isinstance(x, tuple) else (x,)
                if self.actions[first] == "recompute":
                    x = checkpoint(self._run, first, last, *xs, use_reentrant=False)
                else:
                    x = self.layers[first](x)
        # ... and its output too: a storage of it that was moved (a ReLU saves its result)
        # is read from the original again, and the copy released.
        for t in (x if isinstance(x, tuple) else (x,)):
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                rec = saver.records.get(storage.data_ptr())
                if isinstance(rec, _Moved) and rec.origin() is storage:
                    rec.keep(storage)
        return x


class Links:
    """A stage's d2d connections for one run: its server (peers' activations held here) and
    its channels (its own activations held by peers)."""

    def __init__(self, server, channels):
        self.server, self.channels = server, channels

    def finish(self, timeout: float = 600.0) -> None:
        """This stage is done: close its channels (every fetch is done), then wait for its
        senders to fetch theirs."""
        if self.channels is not None:
            self.channels.close()
        if self.server is not None:
            self.server.wait(timeout)

    def close(self) -> None:
        if self.channels is not None:
            self.channels.close()
        if self.server is not None:
            self.server.close()


def press_stage(layers: nn.Sequential, job: PressJob, setup, rank: int,
                device: torch.device) -> tuple[PressStage, Optional[Links]]:
    """The stage module for ``job``'s plan, with its d2d links opened (eagerly, so every
    target knows when all its senders are done)."""
    from mcap.runner.press import d2d

    actions = job.actions(rank)
    targets = sorted({a.target for a in actions if a.action == "d2d"})
    senders = job.d2d_senders(rank)
    if (targets or senders) and not job.channel_dir:
        raise RuntimeError("d2d swap needs the stage processes of one pool (a process group)")
    server = d2d.Server(job.channel_dir, job.run_id, rank, len(senders), device) \
        if senders else None
    channels = None
    if targets:
        channels = d2d.Channels(job.channel_dir, job.run_id, device)
        for t in targets:
            channels.to(t)
    links = Links(server, channels) if server or channels else None
    if all(a.action == "keep" for a in actions):
        # Nothing of this stage moves (it may still hold peers' d2d copies, through its
        # server): it runs as in the plain run. The hooks would change no byte, but their
        # Python call per saved tensor costs CPU time the plan's cost model does not have
        # (AmoebaNet-D's cells: 2-4 ms of a 11-35 ms stage iteration, 9 repeats,
        # bench/bench_press_time.py).
        from mcap.runner.train import Recomputed
        return Recomputed(layers, setup.checkpoint, setup.chunks), links
    return PressStage(layers, actions, rank, channels, device), links
