"""What crossing a stage boundary costs on this machine, measured (issue 25, item 2).

A throughput estimated from stages run alone (``mcap.core.stagetime``) needs what the
activations and gradients cost to move between stage processes the way a concurrent run
moves them: gloo between CPU stage processes, NCCL between GPUs of their own, and for
stages sharing one GPU the exchange ``mcap.runner.exchange`` uses (CUDA IPC by default).
Two processes ping-pong a small and a large tensor through exactly that path; half a
round trip is one crossing, so the small size gives the latency and the difference the
bandwidth (:func:`measure`; ``python -m mcap.runner.link`` is one end).

:func:`link_for` measures once per machine and transport and keeps the answer, in the
process and for a day on disk (``mcap.runner.machinecache``: keyed by the host, its CPU,
cores and torch, the device and the transport, and on CUDA the GPUs); measuring costs two
fresh processes importing torch (1.5 s of a 6 s one-off ``measure`` on the 2-core VM,
bench/log/2026-11-26-later-measure-startup.md). It also
says how many stages can compute at once (``Link.slots``): the cores over the setup's
threads on the CPU, the GPUs on CUDA when stages share them, 0 when each stage has a
device of its own.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from typing import Optional

from mcap.core.stagetime import Link
from mcap.core.types import Setup
from mcap.runner import machinecache
from mcap.runner.machinecache import finite

SMALL, LARGE = 4 << 10, 16 << 20  # bytes
REPEATS = 5
TIMEOUT_S = 120.0
_cache: dict = {}
SECTION = "links"  # of the machine cache (mcap.runner.machinecache)


def transport(setup: Setup) -> tuple[str, int]:
    """(how a concurrent run of ``setup`` moves tensors between stages, compute slots)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if setup.device == "cpu":
        slots = max(1, (cores or 1) // max(1, setup.threads))
        return "gloo", (0 if slots >= setup.stages else slots)
    import torch

    from mcap.runner import exchange
    gpus = torch.cuda.device_count()
    if gpus >= setup.stages:
        return "nccl", 0
    return (exchange.mode(True) or "host"), max(1, gpus)


def link_for(setup: Setup) -> Link:
    """This machine's link for ``setup``'s stages: kept in the process, else read from the
    machine's cache file, else measured and kept in both (module docstring)."""
    how, slots = transport(setup)
    key = (setup.device, how)
    if key not in _cache:
        machine = machine_key(setup.device, how)
        found = cached(machine)
        if found is None:
            found = measure(setup.device, how)
            keep(machine, found)
        _cache[key] = found
    found = _cache[key]
    return Link(found.latency, found.bytes_per_second, found.how, slots)


def _valid(value: dict) -> bool:
    return (isinstance(value.get("how"), str) and finite(value.get("latency"))
            and finite(value.get("bytes_per_second")) and 0 <= value["latency"] < TIMEOUT_S
            and value["bytes_per_second"] > 0)


def machine_key(device: str, how: str) -> str:
    """What a measured link belongs to (``machinecache.machine_key``): this host, its CPU,
    cores and torch, the device and transport, and on CUDA the GPUs."""
    more = {"device": device, "how": how}
    if device == "cuda":
        import torch
        more["gpus"] = [torch.cuda.get_device_name(d) for d in range(torch.cuda.device_count())]
    return machinecache.machine_key(**more)


def cached(machine: str, now: Optional[float] = None) -> Optional[Link]:
    """The link kept on disk for ``machine`` (:func:`machine_key`), None if there is none
    measured within ``machinecache.MAX_AGE_S``."""
    found = machinecache.read(SECTION, machine, _valid, now)
    if found is None:
        return None
    return Link(float(found["latency"]), float(found["bytes_per_second"]), found["how"])


def keep(machine: str, link: Link) -> None:
    """Keep ``link`` on disk for ``machine``."""
    machinecache.write(SECTION, machine, {"how": link.how, "latency": link.latency,
                                          "bytes_per_second": link.bytes_per_second}, _valid)


def measure(device: str, how: str) -> Link:
    """Ping-pong between two fresh processes through ``how`` (module docstring)."""
    with tempfile.TemporaryDirectory(prefix="mcap-link-") as tmp:
        from mcap.runner.machine import process_env
        env = process_env(1)
        if how in ("ipc", "host", "store"):
            env["MCAP_EXCHANGE"] = how
        outs = machinecache.run_processes("mcap.runner.link",
                                          [(tmp, rank, device, how) for rank in (0, 1)], env,
                                          TIMEOUT_S, f"measuring the {how} link between two "
                                          "processes")
    got = json.loads(outs[0])
    return Link(got["latency"], got["bytes_per_second"], how)


def _median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _serve(folder: str, rank: int, device: str, how: str) -> dict:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    backend = "nccl" if how == "nccl" else "gloo"
    if device == "cuda":
        torch.cuda.set_device(rank % torch.cuda.device_count())
    dist.init_process_group(backend, init_method=f"file://{folder}/rendezvous", rank=rank,
                            world_size=2)
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" \
        else torch.device("cpu")
    peer = 1 - rank
    link = None
    if how in ("ipc", "store"):
        from mcap.runner import exchange
        link = exchange.Link(how, dev)

    def crossing(nbytes: int, rep: int) -> float:
        n = nbytes // 4
        src = torch.ones(n, device=dev)
        buf = torch.empty(n, device=dev)
        dist.barrier()
        start = time.perf_counter()
        if link is not None:  # stages sharing a GPU: tokens through gloo, tensors by link
            key_out, key_in = f"ping/{nbytes}/{rep}/{rank}", f"ping/{nbytes}/{rep}/{peer}"
            if rank == 0:
                link.publish(key_out, [src])
                link.fetch(key_in, ("in", 0))
            else:
                link.fetch(key_in, ("in", 0))
                link.publish(key_out, [src])
            link.reclaim(wait=True)
        else:
            t = src if how != "host" else src.cpu()
            b = buf if how != "host" else buf.cpu()
            if rank == 0:
                dist.send(t, peer)
                dist.recv(b, peer)
            else:
                dist.recv(b, peer)
                dist.send(t, peer)
            if how == "host":
                buf.copy_(b)
        if device == "cuda":
            torch.cuda.synchronize()
        return (time.perf_counter() - start) / 2

    for nbytes in (SMALL, LARGE):  # warm the path up once
        crossing(nbytes, -1)
    small = _median([crossing(SMALL, r) for r in range(REPEATS)])
    large = _median([crossing(LARGE, r) for r in range(REPEATS)])
    dist.barrier()
    dist.destroy_process_group()
    bandwidth = (LARGE - SMALL) / max(large - small, 1e-9)
    latency = max(0.0, small - SMALL / bandwidth)
    return {"latency": latency, "bytes_per_second": bandwidth}


if __name__ == "__main__":
    folder, rank, device, how = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    result = _serve(folder, rank, device, how)
    if rank == 0:
        print(json.dumps(result))
