"""The Memory savers page's services: write a plan where dashboard jobs write their files,
and the ``measure --press`` job's arguments (the page itself never touches files)."""
from __future__ import annotations

from pathlib import Path

from mcap.core.pressplan import PressPlan
from mcap.store import Store


def write_plan(store: Store, plan: PressPlan) -> Path:
    """The plan as an ``mcap.press/1`` file under ``out/`` beside the store
    (``mcap.app.jobs.output_path``: unique per store and job), written atomically."""
    from mcap.app.jobs import output_path
    from mcap.io.pressfile import save
    path = output_path(store, "press")
    path.parent.mkdir(parents=True, exist_ok=True)
    return save(plan, path)


def measure_plan_args(measure_args: list, plan_path: Path, capacity: int) -> list:
    """``measure ... --balance B`` (the page's setup flags) + ``--press PLAN --json``, under
    the plan's capacity (replacing the profile's), so the run says whether it really fits."""
    args = list(measure_args)
    if "--capacity" in args:
        i = args.index("--capacity")
        del args[i:i + 2]
    return [*args, "--capacity", str(int(capacity)), "--press", str(plan_path), "--json"]
