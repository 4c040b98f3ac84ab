"""The point-to-point traffic of one hybrid device with its neighbour stages: which rows of
an activation each device holds and needs (:func:`mcap.core.capture.plan.holder_rows`), sent
forward, and their gradients sent back (:mod:`mcap.runner.capture.device`'s docstring)."""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from mcap.core.capture.plan import HybridPlan, holder_rows, need_rows
from mcap.runner import alone as alone_mod
from mcap.runner.capture.groups import Place, places, plan_bounds
from mcap.runner.capture.settling import references, released
from mcap.runner.pipelining import Resident


def _tensors(x) -> list:
    return list(x) if isinstance(x, (tuple, list)) else [x]


def _plain(t: torch.Tensor) -> torch.Tensor:
    """A tensor-parallel output may be an AsyncCollectiveTensor; wait for it."""
    wait = getattr(t, "wait", None)
    return wait() if callable(wait) and not isinstance(t, nn.Parameter) else t


class Links:
    """The point-to-point traffic of one device with its neighbour stages."""

    def __init__(self, plan: HybridPlan, rank: int, micro: int, device, res: Resident,
                 alone: bool = False):
        self.plan, self.rank, self.micro, self.device = plan, rank, micro, device
        self.alone = alone  # receives are filled by mcap.runner.alone; broadcasts here
        self.all = places(plan)
        self.me = self.all[rank]
        s = self.me.stage
        first, last = plan_bounds(plan)[s]
        self.first_layer, self.last_layer = first, last
        self.in_meta = _tensors(res.shapes[first - 1] if first > 0 else res.shapes[-1])
        self.out_meta = _tensors(res.shapes[last])
        self.need = need_rows(self.me.config, micro, self.me.local)

    def _devices(self, stage: int) -> list[Place]:
        return [p for p in self.all if p.stage == stage]

    def _holders(self, stage: int) -> list[tuple[int, tuple[int, int]]]:
        ps = self._devices(stage)
        rows = holder_rows(ps[0].config, self.micro)
        return [(p.start + p.local, r) for p, r in zip(ps, rows) if r[1] > r[0]]

    @staticmethod
    def _overlap(a, b):
        lo, hi = max(a[0], b[0]), min(a[1], b[1])
        return (lo, hi) if hi > lo else None

    def _exchange(self, sends, recvs):
        """sends: [(dst, tensor, tag)], recvs: [(src, buffer, tag)]; all complete on return."""
        ops = [dist.P2POp(dist.isend, t, dst, tag=tag) for dst, t, tag in sends]
        ops += [dist.P2POp(dist.irecv, b, src, tag=tag) for src, b, tag in recvs]
        if ops:
            for work in dist.batch_isend_irecv(ops):
                work.wait()

    def forward_send(self, out, mb: int) -> None:
        """Send the rows this device holds to every device of the next stage needing them."""
        s = self.me.stage
        mine = dict(self._holders(s)).get(self.rank)
        if mine is None:
            return
        my_need = self.need
        sends = []
        for p in self._devices(s + 1):
            want = need_rows(p.config, self.micro, p.local)
            part = self._overlap(mine, want)
            if part:
                a, b = part[0] - my_need[0], part[1] - my_need[0]
                for i, t in enumerate(_tensors(out)):
                    sends.append((p.start + p.local, _plain(t.detach())[a:b].contiguous(),
                                  _tag_of(mb, i, False)))
        self._exchange(sends, [])

    def forward_recv(self, mb: int):
        """This device's input rows from the previous stage, as a leaf that requires grad
        where the activation does; and the parts' (src, rows) for sending gradients back."""
        parts = []
        recvs = []
        for src, rows in self._holders(self.me.stage - 1):
            part = self._overlap(rows, self.need)
            if part:
                bufs = [torch.empty((part[1] - part[0],) + tuple(m.shape[1:]), dtype=m.dtype,
                                    device=self.device) for m in self.in_meta]
                parts.append((src, part, bufs))
                recvs += [(src, b, _tag_of(mb, i, False)) for i, b in enumerate(bufs)]
        self._exchange([], recvs)
        xs = []
        for i, m in enumerate(self.in_meta):
            t = torch.cat([p[2][i] for p in parts]) if len(parts) > 1 else parts[0][2][i]
            xs.append(t.requires_grad_(m.requires_grad and t.is_floating_point()))
        del recvs
        return (tuple(xs) if len(xs) > 1 else xs[0]), [(src, part) for src, part, _ in parts]

    def backward_send(self, x, parts, mb: int) -> None:
        """The gradients of this device's input rows, to the devices that sent them; only
        the holders of the rows send (device 0 of a pp/tp stage, every dp device)."""
        if self.rank not in dict(self._holders(self.me.stage)):
            return
        sends = []
        for src, part in parts:
            a, b = part[0] - self.need[0], part[1] - self.need[0]
            for i, t in enumerate(_tensors(x)):
                if t.grad is not None:
                    sends.append((src, t.grad[a:b].contiguous(), _tag_of(mb, i, True)))
        self._exchange(sends, [])

    def backward_recv(self, out, mb: int, group):
        """The gradients of this device's output rows (None for outputs without grad);
        on a pp/tp stage device 0 receives them all and broadcasts them in the stage."""
        outs = _tensors(out)
        grads = [torch.empty_like(_plain(t.detach())) if t.requires_grad else None
                 for t in outs]
        mine = dict(self._holders(self.me.stage)).get(self.rank)
        if mine is not None:
            recvs = []
            for holder, rows in self._holders(self.me.stage + 1):
                part = self._overlap(mine, rows)
                if part:
                    a, b = part[0] - self.need[0], part[1] - self.need[0]
                    recvs += [(holder, g[a:b], _tag_of(mb, i, True))
                              for i, g in enumerate(grads) if g is not None]
            # Slices of the gradient are views; gloo receives into contiguous buffers
            # only, so receive into fresh ones and copy.
            bufs = [(src, torch.empty_like(v), tag, v) for src, v, tag in recvs]
            self._exchange([], [(src, b, tag) for src, b, tag, _ in bufs])
            for _, b, _, v in bufs:
                v.copy_(b)
            del bufs
        if self.me.config.parallel != "dp" and self.me.config.degree > 1:
            for g in grads:
                if g is not None:
                    before = references(g)
                    dist.broadcast(g, src=self.me.start, group=group)
                    released(g, before)  # gloo's worker lets go of g here, not later
                    if self.alone and mine is None:  # what device 0 would have sent
                        alone_mod.arrive(g)
        return outs, grads


def _tag_of(mb: int, i: int, backward: bool) -> int:
    return (2 * mb + int(backward)) * 64 + i
