"""MPress's times and bandwidths, measured as the runner spends them (``mcap.runner.press.stats``'s
docstring: ``forward_seconds``, ``host_bandwidth``, ``d2d_bandwidth``): the clock of CPU
seconds stage processes read (:func:`clock`), CUDA work timed between events on its stream
(:class:`Stopwatch`), each layer's forward, and the host and d2d swaps of a probe buffer."""
from __future__ import annotations

import statistics
import tempfile
import time
from typing import Callable

import torch

REPEATS = 5
# Bandwidth probes move this many bytes: large enough to be past per-call overheads,
# small enough to take milliseconds.
PROBE_BYTES = 32 * 2**20


def clock(device: torch.device) -> Callable[[], float]:
    """The CPU's timer of this module's seconds (module docstring): the calling thread's
    CPU seconds when torch runs ops on it alone (one intra-op thread, the stage processes'
    default: other threads of the process, idle or not, add nothing), else the whole
    process's. On CUDA the wall clock, for callers that synchronize (this module times
    CUDA work with :class:`Stopwatch`'s events)."""
    if device.type == "cuda":
        return time.perf_counter
    return time.thread_time if torch.get_num_threads() == 1 else time.process_time


class Stopwatch:
    """Seconds of work queued on ``device`` between :meth:`start` and :meth:`stop`.

    On CUDA two events (``enable_timing``) recorded on the device's current stream, read
    after the second has completed: the time the GPU spent from the first to the second,
    the asynchronous copies and kernels included (a CPU-time clock reads almost nothing of
    them; a host clock reads them only after a synchronize, plus its own latency). On the
    CPU :func:`clock`'s CPU seconds, as before. ``wall=True``: the wall clock on the CPU
    (the bandwidth probes, which wait on other threads)."""

    def __init__(self, device: torch.device, wall: bool = False):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.tick = time.perf_counter if wall else clock(self.device)
        self._begin = None

    def _event(self):
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def start(self) -> None:
        self._begin = self._event() if self.cuda else self.tick()

    def stop(self) -> float:
        if not self.cuda:
            return self.tick() - self._begin
        end = self._event()
        end.synchronize()
        return self._begin.elapsed_time(end) / 1000.0  # milliseconds


def forward_seconds(module: torch.nn.Sequential, x: torch.Tensor, repeats: int,
                    device: torch.device) -> list[float]:
    times: list[list[float]] = [[] for _ in module]
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    watch = Stopwatch(device)
    with torch.enable_grad():
        for r in range(repeats + 1):  # the first pass warms up (allocator, oneDNN caches)
            out = x
            for i, layer in enumerate(module):
                sync()
                watch.start()
                out = layer(out)
                took = watch.stop()
                sync()
                if r:
                    times[i].append(took)
            del out
    return [statistics.median(t) for t in times]


def _rate(nbytes: int, probe: Callable[[], tuple[float, float]], repeats: int) -> float:
    probe()  # warm up
    return nbytes / statistics.median(sum(probe()) / 2 for _ in range(repeats))


def host_bandwidth(device: torch.device, repeats: int = REPEATS,
                   nbytes: int = PROBE_BYTES) -> float:
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    watch = Stopwatch(device, wall=True)  # CUDA: events on the copies' stream

    def probe():  # a fresh host buffer each time, as every swapped storage gets one
        watch.start()
        if device.type == "cuda":
            host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        else:
            import numpy as np
            host = torch.from_numpy(np.empty(nbytes, dtype=np.uint8))
        host.copy_(src, non_blocking=True)
        out = watch.stop()
        watch.start()
        back = torch.empty(nbytes, dtype=torch.uint8, device=device)
        back.copy_(host, non_blocking=True)
        return out, watch.stop()
    return _rate(nbytes, probe, repeats)


def d2d_bandwidth(device: torch.device, repeats: int = REPEATS,
                  nbytes: int = PROBE_BYTES) -> float:
    if device.type == "cuda":
        peer = torch.device("cuda", 1 % torch.cuda.device_count())
        src = torch.ones(nbytes, dtype=torch.uint8, device=device)
        dst = torch.empty(nbytes, dtype=torch.uint8, device=peer)
        # torch copies between GPUs on the source's current stream: time it there
        there, back = Stopwatch(device), Stopwatch(peer)

        def probe():
            torch.cuda.synchronize(device)
            torch.cuda.synchronize(peer)
            there.start()
            dst.copy_(src)
            out = there.stop()
            torch.cuda.synchronize(peer)
            back.start()
            src.copy_(dst)
            return out, back.stop()
        return _rate(nbytes, probe, repeats)

    from mcap.runner.press import d2d
    src = torch.ones(nbytes, dtype=torch.uint8)
    with tempfile.TemporaryDirectory(prefix="mcap-d2d-") as folder:
        server = d2d.Server(folder, 0, 1, 1, device)
        channels = d2d.Channels(folder, 0, device)
        channel = channels.to(1)
        key = [0]

        def probe():
            key[0] += 1
            t0 = time.perf_counter()
            channel.put(key[0], src)
            t1 = time.perf_counter()
            channel.get(key[0], nbytes, device)
            return t1 - t0, time.perf_counter() - t1
        try:
            rate = _rate(nbytes, probe, repeats)
        finally:
            channels.close()
            server.wait(10)
    return rate
