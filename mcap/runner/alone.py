"""A stage run alone: the real runtime over a process group that moves no data (issue 25).

A stage's memory truth is what it reads on its own device in a real run (DESIGN.md, "Where
it runs"). Stages that share a GPU, or a CPU, must not change each other's peaks, and a
neighbour's timing must not enter them: with CUDA IPC a producer's block that its consumer
has opened waits in a limbo list until it is collected, and on one H200 that doubled stage
0 of the paper's VGG11 setup (../shared/gpu-h200/README.md, finding 3). So mcap measures
memory the way Megatron-LM's ``--fake-process-group`` and torchtitan's memory estimator do:
each stage runs in its own process, alone, with ``torch.distributed.pipelining``'s own
``PipelineStage`` and schedule over torch's ``fake`` backend (a process group whose
collectives and point-to-point ops complete at once and move nothing), and:

- **a receive** returns the buffer the runtime allocated for it (``PipelineStage``
  allocates its receive buffers itself, one per micro-batch, as in a real run), filled
  here as the arriving data would fill it (so the arithmetic that follows is ordinary
  arithmetic, not uninitialised memory: denormals would distort the stage's times);
- **a send** keeps its tensor for as long as the real runtime would: the work object a
  send returns owns its tensor (gloo's and NCCL's send works hold it until they are
  destroyed, and the schedule keeps the works of a step until it waits on them at the
  step's end), so the wrapper returned here owns it too;
- **the schedule's start-up vote** (torch >= 2.12: stages vote over the group whether
  shapes must be inferred at run time) is set to what every stage of the run votes: each
  stage of an mcap run is built the same way (shapes given up front), so this stage's own
  vote is the run's. Over a group that moves no data the vote would otherwise read the
  zero of an unfilled buffer and switch to dynamic shape inference, which runs an extra
  forward and is not what the real run does.

:func:`join` makes (or re-makes) the fake default group for a stage index and a stage
count; :func:`install` patches ``torch.distributed``'s point-to-point functions once per
process so that, for the fake backend only, sends are held and receives are filled; every
other backend passes through untouched (a worker process measures with one or the other).

:class:`StageTimer` records the seconds of each micro-batch's forward and backward and of
the optimizer step (what throughput is estimated from, ``mcap.core.stagetime``): the
calling thread's CPU seconds on a CPU stage with one intra-op thread (the stage's own
work, whatever else the machine's cores are doing; on the CPU autograd runs a stage's
backward in the calling thread), the process's CPU seconds with more, and on CUDA wall
seconds between device synchronisations.
"""
from __future__ import annotations

import time
from typing import Optional

import torch
import torch.distributed as dist

BACKEND = "fake"
_patched = False
_orig: dict = {}


def join(rank: int, world: int) -> None:
    """This process's default process group: the fake backend as stage ``rank`` of
    ``world`` (kept when it already is; re-made for another index or count)."""
    import torch.testing._internal.distributed.fake_pg as fake_pg  # registers "fake" (older torch)

    if dist.is_initialized():
        if (dist.get_backend() == BACKEND and dist.get_rank() == rank
                and dist.get_world_size() == world):
            return
        dist.destroy_process_group()
    dist.init_process_group(BACKEND, rank=rank, world_size=world, store=fake_pg.FakeStore())
    install()


def leave() -> None:
    if dist.is_initialized() and dist.get_backend() == BACKEND:
        dist.destroy_process_group()


def _fake(group) -> bool:
    try:
        return dist.get_backend(group) == BACKEND
    except (RuntimeError, ValueError):
        return False


class Held:
    """A send's work that owns its tensor, as gloo's and NCCL's send works do."""

    __slots__ = ("work", "tensor")

    def __init__(self, work, tensor: torch.Tensor):
        self.work, self.tensor = work, tensor

    def wait(self, *args, **kwargs):
        return True if self.work is None else self.work.wait(*args, **kwargs)

    def is_completed(self) -> bool:
        return True

    def __getattr__(self, name):
        return getattr(self.work, name)


def arrive(tensor: torch.Tensor) -> None:
    """Fill a receive buffer in place as arriving data would (no allocation)."""
    timer = _timer
    t = timer._now() if timer is not None else 0.0
    with torch.no_grad():
        if tensor.is_floating_point():
            tensor.normal_()
        else:
            tensor.zero_()
    if timer is not None:
        timer._filled += timer._now() - t


def _group_of(args, kwargs):
    if "group" in kwargs:
        return kwargs["group"]
    return args[2] if len(args) > 2 else None


def install() -> None:
    """Patch ``torch.distributed``'s point-to-point functions (once per process): for the
    fake backend, sends are held (:class:`Held`) and receives filled (:func:`arrive`)."""
    global _patched
    if _patched:
        return
    import torch.distributed.distributed_c10d as c10d

    for name in ("isend", "irecv", "recv", "batch_isend_irecv"):
        _orig[name] = getattr(c10d, name)

    def isend(tensor, *args, **kwargs):
        work = _orig["isend"](tensor, *args, **kwargs)
        return Held(work, tensor) if _fake(_group_of((tensor, *args), kwargs)) else work

    def irecv(tensor, *args, **kwargs):
        work = _orig["irecv"](tensor, *args, **kwargs)
        if _fake(_group_of((tensor, *args), kwargs)):
            arrive(tensor)
        return work

    def recv(tensor, *args, **kwargs):
        out = _orig["recv"](tensor, *args, **kwargs)
        if _fake(_group_of((tensor, *args), kwargs)):
            arrive(tensor)
        return out

    def batch_isend_irecv(p2p_op_list):
        if p2p_op_list and all(_fake(op.group) for op in p2p_op_list):
            # One op at a time through the patched functions (the fake backend has no
            # coalescing to do: nothing is sent).
            out = []
            for op in p2p_op_list:
                if op.peer is not None:
                    out.append(op.op(op.tensor, op.peer, op.group, op.tag))
                else:
                    out.append(op.op(op.tensor, group=op.group, tag=op.tag,
                                     **{"group_dst" if op.op is isend else "group_src":
                                        op.group_peer}))
            return out
        return _orig["batch_isend_irecv"](p2p_op_list)

    patched = {"isend": isend, "irecv": irecv, "recv": recv,
               "batch_isend_irecv": batch_isend_irecv}
    # Both namespaces: callers use ``torch.distributed.isend``, and P2POp checks its ``op``
    # against distributed_c10d's own globals.
    for module in (dist, c10d):
        for name, fn in patched.items():
            setattr(module, name, fn)
    _patched = True


def set_vote(schedule, stage) -> None:
    """The start-up vote (torch >= 2.12) as every stage of the run casts it: this stage's
    own (module docstring). Older torch has no vote and needs nothing."""
    if not hasattr(stage, "_warmup_forward_vote") or not hasattr(schedule, "_warmup_p2p"):
        return
    from torch.distributed.pipelining._utils import InferenceMode

    def warmup(stages, has_backward, p2p_done):
        for s in stages:
            dynamic = InferenceMode.needs_dynamic(s._user_meta, has_backward)
            s._inference_mode = InferenceMode.DYNAMIC if dynamic else InferenceMode.STATIC

    schedule._warmup_p2p = warmup


class StageTimer:
    """Seconds of each micro-batch's forward and backward and of each optimizer step, per
    iteration (module docstring: which clock on which device)."""

    def __init__(self, device: torch.device, threads: int):
        self.cuda = device.type == "cuda"
        self.device = device
        self.clock = time.perf_counter if self.cuda else \
            (time.thread_time if threads == 1 else time.process_time)
        self.forward: list[list[float]] = []
        self.backward: list[list[float]] = []
        self.step: list[float] = []
        self.other: list[float] = []  # per iteration: the schedule's own work around them
        self._filled = 0.0  # seconds spent filling receive buffers (not the real runtime's)
        # The measured memory timeline (issue 26): per event (kind, iteration, micro-batch,
        # bytes before, peak inside, bytes after); kind F, B, S (optimizer step) or "-"
        # (the schedule's own work between them: receives, sends, the loss). Its peaks
        # cover the whole window, so their highest is the stage's peak to the byte.
        self.memory: list[tuple] = []
        self._window = None
        self._held: Optional[int] = None
        self._multi = False  # a rank of several chunks: events carry their chunk

    def begin(self, window) -> None:
        """Record the memory timeline of ``window`` (a ``mcap.runner.train.Window`` just
        started) from here on."""
        self._window = window
        self._held = window.current()[0]

    def _segment(self, kind: str, micro: int, before: Optional[int],
                 chunk: Optional[int] = None) -> Optional[int]:
        """Close the segment since the last boundary as an event; the bytes held now.
        ``chunk``: the chunk (torch's stage index) of a multi-stage rank's op, recorded as
        the event's 7th value (-1 for the work between ops); None: a one-stage rank."""
        if self._window is None:
            return None
        peak, now = self._window.segment()
        it = max(0, len(self.forward) - 1)
        event = (kind, it, micro, self._held if before is None else before, peak, now)
        self.memory.append(event if chunk is None and not self._multi else
                           event + (-1 if chunk is None else chunk,))
        self._held = now
        return now

    def _op(self, kind: str, run, micro: int, chunk: Optional[int] = None):
        """Run one op (forward, backward or step) as its own segment of the timeline."""
        before = self._segment("-", -1, None)  # the schedule's work since the last op
        try:
            return run()
        finally:
            self._segment(kind, micro, before, chunk)

    def close(self) -> None:
        """End the timeline (the work after the last op)."""
        self._segment("-", -1, None)

    def _now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize(self.device)
        return self.clock()

    def new_iteration(self) -> None:
        self.forward.append([])
        self.backward.append([])

    def wrap(self, stage, chunk: Optional[int] = None) -> None:
        """Time ``stage.forward_one_chunk``, ``stage.backward_one_chunk`` (B, or I when the
        schedule splits the backward) and ``stage.backward_weight_one_chunk`` (W).
        ``chunk``: the stage's index on a rank of several (recorded in each event).
        Forward seconds go to ``forward``, B, I and W seconds to ``backward``, each in the
        order the schedule ran them (its action list's order)."""
        fwd, bwd = stage.forward_one_chunk, stage.backward_one_chunk
        wgt = getattr(stage, "backward_weight_one_chunk", None)
        if chunk is not None:
            self._multi = True

        def forward_one_chunk(*args, **kwargs):
            t = self._now()
            try:
                return self._op("F", lambda: fwd(*args, **kwargs), _chunk(args, kwargs), chunk)
            finally:
                self.forward[-1].append(self._now() - t)

        def backward_one_chunk(*args, **kwargs):
            t = self._now()
            kind = "B" if kwargs.get("full_backward", True) else "I"
            try:
                return self._op(kind, lambda: bwd(*args, **kwargs), _chunk(args, kwargs), chunk)
            finally:
                self.backward[-1].append(self._now() - t)

        def backward_weight_one_chunk(*args, **kwargs):
            t = self._now()
            try:
                return self._op("W", lambda: wgt(*args, **kwargs), _chunk(args, kwargs), chunk)
            finally:
                self.backward[-1].append(self._now() - t)

        stage.forward_one_chunk, stage.backward_one_chunk = forward_one_chunk, backward_one_chunk
        if wgt is not None:
            stage.backward_weight_one_chunk = backward_weight_one_chunk

    def timed_step(self, step) -> None:
        t = self._now()
        self._op("S", step, -1)
        self.step.append(self._now() - t)

    def timed_schedule(self, step) -> None:
        """Run one ``schedule.step``; what it spends beyond the forwards and backwards
        (receives, sends, the loss, the schedule's own Python) is the iteration's
        ``other``, less the filling of receive buffers, which a real run does not do."""
        global _timer
        self._filled, _timer = 0.0, self
        t = self._now()
        try:
            step()
        finally:
            _timer = None
        total = self._now() - t
        work = sum(self.forward[-1]) + sum(self.backward[-1])
        self.other.append(max(0.0, total - work - self._filled))

    def record(self) -> Optional[tuple]:
        """(forward, backward, step, other, memory): per iteration, per micro-batch
        seconds, and the memory timeline."""
        if not self.forward:
            return None
        return (tuple(tuple(f) for f in self.forward), tuple(tuple(b) for b in self.backward),
                tuple(self.step), tuple(self.other), tuple(self.memory))


def _chunk(args, kwargs) -> int:
    """The micro-batch index a stage's forward_one_chunk / backward_one_chunk was given."""
    if args:
        return int(args[0])
    for key in ("fwd_chunk_id", "bwd_chunk_id"):
        if key in kwargs:
            return int(kwargs[key])
    return -1


_timer: Optional[StageTimer] = None  # the timer of the step running now (arrive's time)
