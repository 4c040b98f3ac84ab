"""Shared look of the drawings: units and colours (one place, so pages agree)."""
from __future__ import annotations

MIB = 1024 * 1024

# One colour per method/baseline, the same on every page.
METHOD_COLORS = {
    "exact": "#2ca02c", "bf": "#17becf", "bo": "#9467bd",
    "time": "#d62728", "uniform": "#7f7f7f", "params": "#ff7f0e",
}


def mib(n: int | float | None) -> float | None:
    """Bytes to MiB for axes and tables; None stays None (not measured)."""
    return None if n is None else n / MIB


def fmt_bytes(n: int | None) -> str:
    """Human-readable bytes for captions: '1.23 GiB', '512.0 MiB', '-'."""
    if n is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def balance_str(balance) -> str:
    """(3, 3, 5, 19) -> '3-3-5-19', as the paper writes partitionings."""
    return "-".join(str(int(n)) for n in balance)
