"""How stages that run together exchange (``$MCAP_EXCHANGE``), decided without torch: the
runner's parent asks it for the machine fingerprint's meter (``mcap.runner.machine.meter``)
and must not import torch for that (a one-off ``measure`` paid a whole torch import, about
2 s, after its run: issue 42, item 6). The exchange itself is :mod:`mcap.runner.exchange`."""
from __future__ import annotations

from typing import Optional

from mcap.runner.isolation import EXCHANGES as MODES, asked_exchange  # noqa: F401 (re-exported)


def mode(shares_gpu: bool) -> Optional[str]:
    """How this run's stages exchange (``$MCAP_EXCHANGE``): None for the process group
    itself (stages on their own devices, or CPU), ``host`` for gloo through host memory,
    ``ipc`` / ``store`` for a :class:`Link`. Default: ``ipc`` when stages share a GPU."""
    asked = asked_exchange()  # McapError naming a bad value
    if asked == "auto":
        return "ipc" if shares_gpu else None
    if asked == "host":
        return "host" if shares_gpu else None
    if asked == "ipc" and not shares_gpu:
        return None  # IPC only where stages share a GPU
    return asked
