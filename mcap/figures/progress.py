"""Live progress of a profile/sweep/measure job: the growing table of per-run peaks."""
from __future__ import annotations

import pandas as pd

from mcap.figures._style import balance_str
from mcap.core.types import Run


def runs_table(runs: tuple[Run, ...]) -> pd.DataFrame:
    """One row per finished run: balance, status, peak, per-device peaks, seconds, samples/s."""
    rows = [(balance_str(r.balance), r.status, r.peak,
             "" if not r.peaks else " / ".join(f"{p / 2**20:.1f}" for p in r.peaks),
             round(r.seconds, 2), r.samples_per_second, r.error or "") for r in runs]
    frame = pd.DataFrame(rows, columns=["balance", "status", "peak", "peaks_mib", "seconds",
                                        "samples_per_second", "error"])
    frame["peak"] = frame["peak"].astype("Int64")
    return frame
