"""MPress statistics for a profile (issue 16, item 1): ``profile --press`` adds them; and
the keep-all run a plan can start from (``press --measure-base``).

The measuring itself is torch work in :mod:`mcap.runner.press.stats` (this process, the
setup's device and threads); here it is attached to the profile, which the store and the
``mcap.profile/1`` file keep (``Profile.press``, ``mcap.core.press.statsjson``)."""
from __future__ import annotations

import dataclasses

from typing import Optional, Sequence

from mcap.core.errors import McapError
from mcap.core.types import Profile, PressStats


def measure_stats(spec: str, profile: Profile) -> PressStats:
    from mcap.runner.press.stats import measure
    return measure(spec, profile.setup)


def with_press(spec: str, profile: Profile) -> Profile:
    """``profile`` with its MPress statistics measured now."""
    return dataclasses.replace(profile, press=measure_stats(spec, profile))


def keep_all_peaks(profile: Profile, balance: Sequence[int], timeout: float = 300.0
                   ) -> tuple[tuple[int, ...], Optional[str]]:
    """Per-stage peaks of ``balance`` with every layer kept, measured now on this machine
    under the profile's setup (one real run, as MPress profiles the job it plans for), and
    a warning when this machine is not the one the profile was measured on (None when it
    is, or either is unknown). A plan then starts from these instead of the predicted
    peaks, so a predictor's error on that partitioning does not carry into the plan."""
    from mcap.core.machine import mismatch
    from mcap.runner import open_runner

    with open_runner(profile.model.spec, profile.setup, timeout=timeout) as runner:
        run = runner.measure(tuple(balance))
        machine = runner.machine
    if run.status != "ok":
        raise McapError(f"the keep-all run of balance {','.join(map(str, balance))} did not "
                        f"finish ({run.status}): {run.error}")
    return tuple(int(x) for x in run.peaks), mismatch(profile.machine, machine,
                                                      ("profile", "keep-all run"))
