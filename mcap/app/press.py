"""The Memory savers page's services: write a plan where dashboard jobs write their files,
the ``measure --press`` job's arguments, and a measured keep-all run to plan from (the page
itself never touches files)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from mcap.core.press.actions import PressPlan
from mcap.core.units import fmt_bytes
from mcap.store import Store

# A plan that lowers the fullest device by less than this share of its peak does nothing a
# reader can see: the pages say so instead of opening on it (issue 26).
WORTH = 0.01


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
    return save(plan, output_path(store, "press"))


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


@dataclass(frozen=True)
class Room:
    """How far any plan can lower a partitioning's peak (MPress moves activations; the
    parameter state stays): the keep-all peak ``top`` of the fullest device ``device``, the
    least any plan reaches (``mcap.core.press.smallest_capacity``), and that device's
    parameter state (weights, gradients, optimizer state)."""
    balance: tuple[int, ...]
    top: int
    least: int
    device: int
    state: int

    @property
    def fraction(self) -> float:
        return (self.top - self.least) / self.top if self.top else 0.0

    @property
    def worth(self) -> bool:
        return self.fraction >= WORTH

    def default_capacity(self) -> int:
        """Where the capacity input starts: halfway down the room, where a plan has work to
        do; at the least when the room is too small to show (the most any plan does)."""
        return (self.least + self.top) // 2 if self.worth else self.least

    def sentence(self) -> Optional[str]:
        """Why no plan is worth showing for this partitioning, or None when one is."""
        if self.worth:
            return None
        b = "-".join(map(str, self.balance))
        state = (f" Device {self.device} holds {fmt_bytes(self.state)} of parameter state "
                 "(weights, gradients, optimizer state), which no plan moves: MPress moves "
                 "activations." if self.state >= self.least / 2 else "")
        if self.least >= self.top:
            return (f"No plan lowers {b}'s peak ({fmt_bytes(self.top)}, on device "
                    f"{self.device}).{state}")
        return (f"No plan lowers {b}'s peak by {100 * WORTH:.0f}% or more: at most from "
                f"{fmt_bytes(self.top)} to {fmt_bytes(self.least)} "
                f"({100 * self.fraction:.2f}%), on device {self.device}.{state}")


def room(p, param_bytes: Sequence[int], state_copies: int = 3) -> Room:
    """The :class:`Room` of planning problem ``p`` (``mcap.core.press.problem``)."""
    from mcap.core.partition import windows
    from mcap.core.press import smallest_capacity
    top = max(p.base)
    device = max(range(len(p.base)), key=lambda s: p.base[s])
    a, z = windows(p.balance)[device]
    state = state_copies * sum(int(x) for x in param_bytes[a:z + 1])
    return Room(tuple(p.balance), int(top), int(smallest_capacity(p)), device, min(state, int(top)))


def candidates(num_layers: int, stages: int, picks: Sequence[Sequence[int]] = ()) -> list:
    """The partitionings :func:`showcase` tries: the given picks (the quick methods'), then
    for every device the split that gives it all the layers it can take (one per other
    device), and the same with one layer moved to each neighbour: a plan has the most to
    move where one device holds many layers' activations."""
    out = [tuple(int(n) for n in b) for b in picks]
    if stages < 1 or num_layers < stages:
        return out
    for d in range(stages):
        heavy = [1] * stages
        heavy[d] = num_layers - stages + 1
        out.append(tuple(heavy))
        for n in (d - 1, d + 1):
            if 0 <= n < stages and heavy[d] > 1:
                moved = list(heavy)
                moved[d] -= 1
                moved[n] += 1
                out.append(tuple(moved))
    return list(dict.fromkeys(out))


def showcase(rooms: Sequence[Room]) -> Room:
    """Of several partitionings' rooms, the one where a plan lowers the fullest device the
    most (bytes), among those where it is worth showing if any is (issue 40, item 14: the
    Memory savers page's "open the press profile" landed on mCAP's pick, which no plan
    lowers); the first on a tie."""
    if not rooms:
        raise ValueError("no partitioning to choose from")
    worth = [r for r in rooms if r.worth] or list(rooms)
    return max(worth, key=lambda r: (r.top - r.least, -worth.index(r)))


def best_room(profile, predictor: Optional[str] = None) -> Room:
    """Where the Memory savers page opens a profile with MPress statistics: the
    :func:`showcase` of the quick methods' picks and the :func:`candidates` around them,
    under ``predictor``. Its ``default_capacity()`` is the capacity to open at."""
    from mcap.app.searches import quick_methods, run_method
    from mcap.core.errors import McapError
    from mcap.core.press import problem
    from mcap.core.teaching import state_copies
    stages, layers = profile.setup.stages, profile.model.num_layers
    picks = []
    for method in quick_methods():
        try:
            picks.append(run_method(profile, stages, method, predictor).balance)
        except McapError:
            continue
    params = [layer.param_bytes for layer in profile.model.layers]
    rooms = []
    for balance in candidates(layers, stages, picks):
        try:
            rooms.append(room(problem(profile, balance, None, predictor), params,
                              state_copies(profile.setup)))
        except McapError:
            continue
    return showcase(rooms)
