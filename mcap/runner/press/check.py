"""Whether an MPress plan can be applied to a run (issue 16, item 2); no torch."""
from __future__ import annotations

from mcap.core.errors import McapError
from mcap.core.press.actions import PressPlan
from mcap.core.types import Setup


def check_plan(plan: PressPlan, spec: str, setup: Setup, balance: tuple) -> None:
    """Refuse, naming the values, a plan that does not belong to this model, balance and
    setup. Plans are made for setups without torchgpipe-style recomputation
    (``checkpoint never``): under ``except_last``/``always`` the stage already recomputes
    every layer, so a plan's actions would act on activations that are not kept."""
    from mcap.models.spec import normalise_spec
    from mcap.runner import engines

    if not isinstance(plan, PressPlan):
        raise McapError(f"expected an MPress plan (PressPlan), got {type(plan).__name__}")
    try:
        same = normalise_spec(plan.model) == normalise_spec(spec)
    except McapError:
        same = False
    if not same:
        raise McapError(f"the plan is for model {plan.model!r} but the run measures "
                        f"{spec!r}")
    if tuple(plan.balance) != tuple(balance):
        raise McapError(f"the plan is for balance {','.join(map(str, plan.balance))} but the "
                        f"run measures balance {','.join(map(str, balance))}")
    if setup.checkpoint != "never":
        raise McapError(f"an MPress plan is measured under checkpoint never; this setup has "
                        f"checkpoint {setup.checkpoint!r}, which already recomputes the "
                        f"stages' activations (use --checkpoint never)")
    engine = engines.get(setup.engine)
    if not engine.press:
        raise McapError(f"engine {setup.engine} does not apply MPress plans; use engine "
                        f"{', '.join(n for n in engines.names() if engines.get(n).press)}")
