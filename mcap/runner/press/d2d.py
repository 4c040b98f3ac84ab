"""Device-to-device swap between stage processes (MPress III-C; issue 16, item 2).

Each stage process that receives d2d activations runs a :class:`Server` thread for the
run: it listens on a Unix socket in the pool's private folder; a sender stage connects
once (:class:`Channels`), and per moved storage asks it to ``put`` (hold these bytes) and
later ``get`` them back (which frees them in the target) or ``drop`` them.

Where the bytes live, and so which peak counts them:

* CPU stage processes: the target's server thread receives the bytes straight into a
  ``torch.empty`` uint8 tensor of the target process, allocated by PyTorch's CPU allocator,
  which ``mcap.runner.memtrack`` wraps in every stage process; so they count in the
  **target's** peak (category ``other``) from the moment they arrive until they are sent
  back, and they leave the sender's counted memory once its own reference is gone.
  (A Unix socket, not a shared segment: shared memory is allocated outside PyTorch's CPU
  allocator and would be counted by nobody.)
* CUDA: the target allocates the buffer on its own GPU (counted by its
  ``max_memory_allocated``) and answers with a CUDA IPC handle
  (``torch.multiprocessing.reductions.reduce_tensor``); the sender opens it and copies
  device to device (a peer copy over NVLink where the GPUs have it), and copies back from
  it in backward. Written against the PyTorch docs; not exercised on this CPU machine.

The target keeps serving after its own schedule is done until every sender has closed
its connection (a sender's backward, which fetches the bytes back, may end after the
target's).
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time
from typing import Optional

import torch

CONNECT_SECONDS = 120.0  # the target may still be building its stage
_HEADER = struct.Struct("!Q")


def address(channel_dir: str, run_id: int, rank: int) -> str:
    return os.path.join(channel_dir, f"d2d-{run_id}-{rank}.sock")


class _Conn:
    """Pickled control messages and raw bytes (``sendall`` / ``recv_into``, no copies
    through Python objects) over one Unix stream socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send(self, obj) -> None:
        data = pickle.dumps(obj)
        self.sock.sendall(_HEADER.pack(len(data)) + data)

    def recv(self):
        (n,) = _HEADER.unpack(self._exact(_HEADER.size))
        return pickle.loads(self._exact(n))

    def send_bytes(self, view: memoryview) -> None:
        self.sock.sendall(view)

    def recv_bytes_into(self, view: memoryview) -> None:
        got, n = 0, len(view)
        while got < n:
            k = self.sock.recv_into(view[got:], n - got)
            if not k:
                raise EOFError("d2d: the peer closed the connection")
            got += k

    def _exact(self, n: int) -> bytes:
        buf = bytearray(n)
        self.recv_bytes_into(memoryview(buf))
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()


class Server:
    """The target side: holds the bytes its peers put, in this process's counted memory."""

    def __init__(self, channel_dir: str, run_id: int, rank: int, senders: int,
                 device: torch.device):
        self.device, self.senders = device, senders
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(address(channel_dir, run_id, rank))
        self.listener.listen(max(1, senders))
        self.held: dict[tuple[int, int], torch.Tensor] = {}
        self.error: Optional[str] = None
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        serving = []
        for n in range(self.senders):
            try:
                conn = _Conn(self.listener.accept()[0])
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn, n), daemon=True)
            t.start()
            serving.append(t)
        for t in serving:
            t.join()

    def _serve(self, conn, peer: int) -> None:
        from mcap.runner import memtrack
        try:
            while True:
                try:
                    op, key, nbytes = conn.recv()
                except (EOFError, OSError, struct.error):
                    break
                k = (peer, key)
                if op == "put":
                    try:
                        buf = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
                    except Exception as exc:  # over the capacity: the sender's run is oom
                        conn.send(("error", str(exc).splitlines()[0]))
                        continue
                    if self.device.type == "cpu" and memtrack.installed():
                        memtrack.retag(buf, memtrack.OTHER)  # activations, whatever tag is set
                    with self._lock:
                        self.held[k] = buf
                    if self.device.type == "cuda":
                        from torch.multiprocessing.reductions import reduce_tensor
                        conn.send(("ok", reduce_tensor(buf)))
                    else:
                        conn.send(("ok", None))
                        conn.recv_bytes_into(memoryview(buf.numpy()))
                elif op == "get":
                    with self._lock:
                        buf = self.held.pop(k)
                    if self.device.type == "cuda":
                        torch.cuda.synchronize(self.device)
                        conn.send(("ok", None))
                        conn.recv()  # the sender has copied it back: free it now
                    else:
                        conn.send_bytes(memoryview(buf.numpy()))
                    del buf
                elif op == "drop":
                    with self._lock:
                        self.held.pop(k, None)
        finally:
            with self._lock:
                for k in [k for k in self.held if k[0] == peer]:
                    del self.held[k]
            conn.close()

    def wait(self, timeout: float) -> None:
        """Until every sender has connected, fetched and closed (or ``timeout`` s)."""
        self._threads[0].join(timeout)
        self.close()

    def close(self) -> None:
        try:
            self.listener.close()
        except OSError:
            pass


class _Channel:
    """The sender side of one target."""

    def __init__(self, path: str, device: torch.device):
        self.device = device
        deadline = time.monotonic() + CONNECT_SECONDS
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(path)
                self.conn = _Conn(sock)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                sock.close()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"d2d: no stage listened on {path} within "
                                       f"{CONNECT_SECONDS:g} s") from None
                time.sleep(0.01)
        self.remote: dict[int, torch.Tensor] = {}  # CUDA: the peer's buffers, opened by IPC
        # Drops are sent before the next request, never in the middle of one (a drop may
        # come from a finalizer at any moment).
        self.drops: list[int] = []

    def _flush(self) -> None:
        while self.drops:
            self.conn.send(("drop", self.drops.pop(), 0))

    def put(self, key: int, data: torch.Tensor) -> None:
        self._flush()
        self.conn.send(("put", key, data.numel()))
        status, handle = self.conn.recv()
        if status != "ok":
            raise torch.OutOfMemoryError(f"d2d target: {handle}")
        if self.device.type == "cuda":
            rebuild, args = handle
            peer = rebuild(*args)
            peer.copy_(data)  # device to device
            torch.cuda.synchronize(data.device)
            torch.cuda.synchronize(peer.device)
            self.remote[key] = peer
        else:
            self.conn.send_bytes(memoryview(data.numpy()))

    def get(self, key: int, nbytes: int, device: torch.device) -> torch.Tensor:
        back = torch.empty(nbytes, dtype=torch.uint8, device=device)  # counted here again
        self._flush()
        self.conn.send(("get", key, nbytes))
        if self.device.type == "cuda":
            self.conn.recv()
            peer = self.remote.pop(key)
            back.copy_(peer)
            torch.cuda.synchronize(device)
            torch.cuda.synchronize(peer.device)
            del peer
            self.conn.send("copied")
        else:
            self.conn.recv_bytes_into(memoryview(back.numpy()))
        return back

    def drop(self, key: int) -> None:
        self.remote.pop(key, None)
        self.drops.append(key)

    def close(self) -> None:
        self.remote.clear()
        self.conn.close()


class Channels:
    """A sender's connections, one per target, opened on first use and closed at the end
    of the run (which lets the targets' servers finish)."""

    def __init__(self, channel_dir: str, run_id: int, device: torch.device):
        self.channel_dir, self.run_id, self.device = channel_dir, run_id, device
        self.open: dict[int, _Channel] = {}

    def to(self, target: int) -> _Channel:
        if target not in self.open:
            self.open[target] = _Channel(address(self.channel_dir, self.run_id, target),
                                         self.device)
        return self.open[target]

    def close(self) -> None:
        for ch in self.open.values():
            ch.close()
        self.open.clear()
