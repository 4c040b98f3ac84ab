"""A profile's CAPTURE and MPress statistics in the store: they ride in the ``extra`` column
of its ``profiles`` row beside the file keys mcap does not know, written and read back with
the checks a profile file's ``variants`` and ``press`` pass (``mcap.core.capture.variantsjson``,
``mcap.core.press.statsjson``)."""
from __future__ import annotations

from typing import Optional

from mcap.core import fields
from mcap.core.errors import StoreError
from mcap.core.types import Run
from mcap.store.records import extra_from_json, extra_to_json

# A profile's CAPTURE / MPress statistics ride in the extra column under these keys
# (mcap.core.capture.variantsjson and mcap.core.press.statsjson have their shape); the JSON is only ever parsed, never evaluated.
_VARIANTS, _PRESS = "__mcap_variants__", "__mcap_press__"


def _plain_run(run: Run) -> dict:
    return {"balance": list(run.balance), "status": run.status,
            "peaks": None if run.peaks is None else list(run.peaks),
            "seconds": float(run.seconds), "samples_per_second": run.samples_per_second,
            "error": run.error}


def profile_extra_to_json(profile) -> Optional[str]:
    """The extra column of a profile: unknown file keys plus its variants and press stats."""
    from mcap.core.capture import variantsjson
    from mcap.core.press import statsjson
    extra = dict(profile.extra or {})
    if profile.variants:
        extra[_VARIANTS] = variantsjson.variants_to_json(profile.variants, _plain_run)
    if profile.press is not None:
        extra[_PRESS] = statsjson.press_to_json(profile.press)
    return extra_to_json(extra or None)


def profile_extra_from_json(text: Optional[str], num_layers: int,
                            r: Optional[fields.Reader] = None):
    """(extra, variants, press) back from the extra column, every value checked as a
    profile file's ``variants`` and ``press`` are."""
    from mcap.core.capture import variantsjson
    from mcap.core.press import statsjson
    r = r or fields.Reader("store: profiles", StoreError)
    extra = dict(extra_from_json(text, r) or {})

    def fail(where, msg):
        return r.fail(f"extra.{where}", msg)

    def runs(items, where):
        return fields.run_list(items, fields.Reader(f"{r.source}: extra", StoreError),
                               num_layers, where, per_device=True)

    variants = variantsjson.variants_from_json(extra.pop(_VARIANTS, []), num_layers, fail, runs)
    press = statsjson.press_from_json(extra.pop(_PRESS, None), num_layers, fail)
    return extra or None, variants, press
