"""MPress statistics for a profile (issue 16, item 1): ``profile --press`` adds them.

The measuring itself is torch work in :mod:`mcap.runner.pressstats` (this process, the
setup's device and threads); here it is attached to the profile, which the store and the
``mcap.profile/1`` file keep (``Profile.press``, ``mcap.core.extras``)."""
from __future__ import annotations

import dataclasses

from mcap.core.types import Profile, PressStats


def measure_stats(spec: str, profile: Profile) -> PressStats:
    from mcap.runner.pressstats import measure
    return measure(spec, profile.setup)


def with_press(spec: str, profile: Profile) -> Profile:
    """``profile`` with its MPress statistics measured now."""
    return dataclasses.replace(profile, press=measure_stats(spec, profile))
