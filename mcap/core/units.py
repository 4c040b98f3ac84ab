"""One way to show bytes (pure). The library keeps int bytes; tables and charts show
binary units chosen by size (B, KiB, MiB, GiB, TiB); downloads keep raw bytes."""
from __future__ import annotations

UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")


def fmt_bytes(n) -> str:
    """``1536`` -> ``"1.50 KiB"``; ``None`` -> ``"-"``."""
    if n is None:
        return "-"
    v = float(n)
    for unit in UNITS:
        if abs(v) < 1024 or unit == UNITS[-1]:
            return f"{v:.0f} {unit}" if unit == "B" else f"{v:.2f} {unit}"
        v /= 1024
    return f"{n} B"
