"""A schedule's action list, read off torch's own schedule class (issue 39).

The order is taken from what torch *executes*, for each kind of schedule:

- **multi-stage schedules** (interleaved, looped BFS, zero bubble, ZBV, DualPipeV) run the
  lowered list ``pipeline_order_with_comms`` that their constructor computes for every rank
  from the stage count, the ranks and the micro-batches alone: the class is built for rank 0
  over stand-in stages that carry only those numbers, and the compute actions of that list
  are read;
- **single-stage schedules** (GPipe, 1F1B) do not run a list: their ``_step_microbatches``
  loops call the stage's ``forward_one_chunk`` / ``backward_one_chunk`` directly. Their
  ``pipeline_order`` is a description only, and in torch 2.13 a wrong one for 1F1B's last
  rank (it lists ``F1..F8`` for 8 micro-batches, while the loop runs ``F0..F7``). So their
  order is traced: torch's own ``_step_microbatches`` runs for each rank over a stand-in
  stage that records the calls and moves nothing.

Either way the result is mcap's pure :class:`mcap.core.schedules.actions.ActionList`. The
single-stage loops also decide when a send's work, and so its tensor, is let go of (1F1B
waits on each send at its next exchange; GPipe keeps them all to the end of its loop), and
how long the loop's own ``output`` variable keeps a forward's output (GPipe's keeps the last
micro-batch's, the logits on the last stage, to the end): the trace records both
(``ActionList.releases``), from stand-in objects whose release is observed. The multi-stage runtime keeps every send's work until the end of the step. The runner builds the same
class over real stages (:mod:`mcap.runner.pipelining`) and a test checks the two orders are
the same, so the runner, the predictor and the teaching view read one list.

``python -m mcap.runner.orders SCHEDULE G V M [G V M ...] [SCHEDULE ...]`` prints the lists as
JSON, in the order asked (how a process that must not import torch, the dashboard server,
gets them: ``mcap.io.orders``).
"""
from __future__ import annotations

import functools
import gc
import json
import sys
import types
import weakref

from mcap.core import schedules
from mcap.core.errors import McapError
from mcap.core.schedules.actions import ActionList, from_texts, to_dict


def _stand_in(index: int, stages: int, num_stages: int):
    """What a schedule's constructor reads of a stage: its index, the stage count, the
    group's size and this rank (0)."""
    return types.SimpleNamespace(stage_index=index, num_stages=num_stages, group_size=stages,
                                 group_rank=0, is_first=index == 0,
                                 is_last=index == num_stages - 1,
                                 stage_index_to_group_rank=None, submod=None)


def torch_class(name: str):
    from torch.distributed.pipelining import schedules as torch_schedules
    cls = getattr(torch_schedules, schedules.get(name).torch_class, None)
    if cls is None:
        import torch
        raise McapError(f"schedule {name} needs torch's "
                        f"{schedules.get(name).torch_class}, which torch {torch.__version__} "
                        "does not have")
    return cls


def order_of(schedule_obj) -> dict:
    """A multi-stage schedule object's per-rank order as action texts: the lowered list its
    runtime executes (communication actions are dropped when parsed)."""
    order = getattr(schedule_obj, "pipeline_order_with_comms", None) \
        or getattr(schedule_obj, "pipeline_order", None)
    if not order:
        raise McapError(f"{type(schedule_obj).__name__} exposes no action list")
    return {int(r): [str(a) for a in acts if a is not None and _compute(a)]
            for r, acts in order.items()}


def _compute(action) -> bool:
    return bool(getattr(action, "is_compute_op", False))


class _Op:
    """A stand-in for a point-to-point op: which send it is (kind F: the output of a
    forward, B: the input gradient of a backward), or a receive. A send op holds its tensor
    as its work does (``dist.P2POp``), so both are watched."""
    __slots__ = ("send", "kind", "mb", "peer", "__weakref__")

    def __init__(self, send: bool, kind: str, mb: int):
        self.send, self.kind, self.mb, self.peer = send, kind, mb, 0


class _Work:
    """A stand-in for a send's work: when the runtime lets go of it, the recorder notes how
    many of the rank's compute actions had run (what a real work's tensor lives until)."""
    __slots__ = ("__weakref__",)

    def wait(self, *args, **kwargs):
        return True


class _Recorder:
    """A stand-in stage for a single-stage schedule's loop: records each forward and
    backward it is asked for, and when each send's work is let go of; moves nothing."""

    def __init__(self, index: int, num_stages: int):
        self.stage_index, self.num_stages = index, num_stages
        self.is_first, self.is_last = index == 0, index == num_stages - 1
        self.calls: list[str] = []
        # (kind, chunk, micro-batch, compute actions done): F a forward's output sent, B a
        # backward's input gradient sent, O a forward's output the loop itself still held
        self.released: list[tuple] = []
        self._alive: dict = {}  # (kind, micro-batch) -> its op and work objects alive

    def get_fwd_recv_ops(self, i):
        return [] if self.is_first else [_Op(False, "F", int(i))]

    def get_bwd_recv_ops(self, i):
        return [] if self.is_last else [_Op(False, "B", int(i))]

    def get_fwd_send_ops(self, i):
        return [] if self.is_last else [self._watched(_Op(True, "F", int(i)))]

    def get_bwd_send_ops(self, i):
        return [] if self.is_first else [self._watched(_Op(True, "B", int(i)))]

    def batch_p2p(self, ops, desc=None):
        return [self._watched(_Work(), op.kind, op.mb) for op in ops if op.send]

    def _watched(self, obj, kind: str = "", mb: int = 0):
        kind, mb = (obj.kind, obj.mb) if isinstance(obj, _Op) else (kind, mb)
        self._alive[(kind, mb)] = self._alive.get((kind, mb), 0) + 1
        weakref.finalize(obj, self._gone, kind, mb)
        return obj

    def _gone(self, kind: str, mb: int) -> None:
        """The op or work of a send is gone; its tensor goes with the last of them."""
        self._alive[(kind, mb)] -= 1
        if not self._alive[(kind, mb)]:
            self.released.append((kind, self.stage_index, mb, len(self.calls)))

    def forward_one_chunk(self, i, *args, **kwargs):
        self.calls.append(f"{self.stage_index}F{int(i)}")
        # the loop's own reference to the output (``output = stage.forward_one_chunk(...)``)
        return self._watched(_Work(), "O", int(i))

    def backward_one_chunk(self, i, *args, full_backward=True, **kwargs):
        self.calls.append(f"{self.stage_index}{'B' if full_backward else 'I'}{int(i)}")

    def backward_weight_one_chunk(self, i, *args, **kwargs):
        self.calls.append(f"{self.stage_index}W{int(i)}")

    def perform_reduce_grad(self, *args, **kwargs):
        pass


def traced_order(cls, stages: int, chunks: int) -> tuple[dict, dict]:
    """Each rank's calls when torch's single-stage ``cls`` runs its step loop, and when the
    loop let go of each send's work (its tensor lives that long)."""
    from torch.distributed.pipelining import schedules as torch_schedules
    out, releases = {}, {}
    saved = torch_schedules._batch_p2p
    # What the trace lets go of in cycles is found by a collection after each rank's loop.
    # Nothing that existed before the trace is among it, so the heap is frozen first (when
    # this process has not frozen it itself): the collections then read only the trace's
    # objects, a millisecond each instead of a quarter second over torch's heap (what a
    # one-off ``measure`` waited for four times before its estimate; issue 42).
    thawed = gc.get_freeze_count() == 0
    if thawed:
        gc.freeze()
    try:
        for rank in range(stages):
            stage = _Recorder(rank, stages)
            obj = cls(_stand_in(rank, stages, stages), chunks, loss_fn=None)
            obj._stage = stage
            obj._initialize_stage = lambda *a, **k: None
            obj._maybe_compute_loss = lambda *a, **k: None
            obj._maybe_get_loss = lambda *a, **k: None
            obj._update_losses = lambda *a, **k: None
            torch_schedules._batch_p2p = stage.batch_p2p  # _sorted_batch_p2p calls it too
            obj._step_microbatches(arg_mbs=[()] * chunks, kwarg_mbs=[{}] * chunks,
                                   return_outputs=False)
            gc.collect()
            out[rank], releases[rank] = stage.calls, tuple(stage.released)
    finally:
        torch_schedules._batch_p2p = saved
        if thawed:
            gc.unfreeze()
    return out, releases


@functools.lru_cache(maxsize=512)
def generate(schedule: str, stages: int, virtual: int, chunks: int) -> ActionList:
    """The action list torch's class for ``schedule`` runs with G ranks, V chunks per rank
    and M micro-batches; McapError naming the rule torch would refuse."""
    import torch

    spec = schedules.get(schedule)
    v = spec.virtual(virtual)
    spec.check(stages, v, chunks)
    cls = torch_class(schedule)
    n = stages * v
    placement = spec.placement(stages, v)
    loss = lambda output, target: output  # noqa: E731  (never called: no step is run)
    try:
        if not spec.multi:
            texts, releases = traced_order(cls, stages, chunks)
            return from_texts(schedule, stages, v, chunks, texts, placement,
                              source=f"torch {torch.__version__} {cls.__name__}",
                              releases=releases)
        obj = cls([_stand_in(c, stages, n) for c in placement[0]], chunks, loss_fn=loss)
    except (ValueError, RuntimeError, AssertionError, TypeError) as exc:
        raise McapError(f"torch refuses schedule {schedule} with {stages} ranks, {v} stages "
                        f"per rank and {chunks} micro-batches: {exc}") from None
    mapping = getattr(obj, "stage_index_to_group_rank", None)
    if mapping:
        torch_placement = tuple(tuple(sorted(c for c, r in mapping.items() if r == rank))
                                for rank in range(stages))
        if torch_placement != placement:
            raise McapError(f"torch places the chunks of {schedule} as {torch_placement}, "
                            f"not {placement}")
    return from_texts(schedule, stages, v, chunks, order_of(obj), placement,
                      source=f"torch {torch.__version__} {cls.__name__}")


USAGE = "usage: python -m mcap.runner.orders SCHEDULE G V M [G V M ...] [SCHEDULE G V M ...]"


def requests(argv: list[str]) -> list[tuple[str, int, int, int]]:
    """``SCHEDULE G V M [G V M ...]``, and more schedules after it, as (schedule, G, V, M):
    one child process answers every list a page needs (``mcap.io.orders``). ValueError
    when the words are not that."""
    out, name, numbers = [], None, []

    def flush():
        if name is None or not numbers or len(numbers) % 3:
            raise ValueError(USAGE)
        out.extend((name, *numbers[i:i + 3]) for i in range(0, len(numbers), 3))

    for word in argv:
        if word.lstrip("-").isdigit():
            if name is None:
                raise ValueError(USAGE)
            numbers.append(int(word))
        else:
            if name is not None:
                flush()
            name, numbers = word, []
    flush()
    return out


def main(argv: list[str]) -> int:
    try:
        wanted = requests(argv)
    except ValueError:
        print(USAGE, file=sys.stderr)
        return 2
    out = []
    try:
        for name, g, v, m in wanted:
            out.append(to_dict(generate(name, g, v, m)))
    except McapError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
