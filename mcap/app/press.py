"""The Memory savers page's services: write a plan where dashboard jobs write their files,
the ``measure --press`` job's arguments, and a measured keep-all run to plan from (the page
itself never touches files)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

from mcap.core.pressplan import PressPlan
from mcap.store import Store


def capacity_input_mib(nbytes: int) -> float:
    """A capacity as the pages' number input shows it (MiB, two decimals), rounded **up**:
    rounded to the nearest hundredth it can fall below the bytes it stands for, and a
    default at the least capacity any plan reaches (a partitioning whose fullest device
    nothing can lower) then opened the page on "no plan fits"."""
    return -(-int(nbytes) * 100 // 2**20) / 100


def below_least(capacity: int, least: int) -> Optional[str]:
    """A sentence for a capacity under the least any plan reaches, in the input's unit."""
    if capacity >= least:
        return None
    return (f"Capacity {capacity / 2**20:.2f} MiB is below what any plan reaches for this "
            f"partitioning: enter at least {capacity_input_mib(least):.2f} MiB.")


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


def measured_keep_all(store: Store, profile, balance: Sequence[int]) -> Optional[tuple[int, ...]]:
    """The per-stage peaks of ``balance`` with every layer kept, measured in ``store`` under
    the profile's model, setup and machine (a ``measure`` job of the page), or None: what
    ``press --measure-base`` plans from."""
    study = store.find_study(profile.model.spec, profile.setup)
    if study is None:
        return None
    run = store.find_run(study, tuple(balance), machine=profile.machine)
    return tuple(run.peaks) if run is not None and run.status == "ok" else None
