"""1F1B (PipeDream-flush): warm-up forwards, then one forward and one backward in turn
(``Schedule1F1B``)."""
from mcap.core.schedules.base import Schedule, register


@register
class OneFOneB(Schedule):
    name, label = "1f1b", "1F1B"
    help = ("one forward, one backward: rank r starts backwards after G-1-r warm-up forwards, "
            "so it holds fewer micro-batches than GPipe (torch's Schedule1F1B)")
    torch_class = "Schedule1F1B"
    microbatch_rule = "at_least_stages"
    color = "#ff7f0e"
