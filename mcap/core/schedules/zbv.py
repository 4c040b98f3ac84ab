"""ZBV zero bubble (Qi et al. 2024, the V schedule): ``ScheduleZBVZeroBubble``, two stages
per rank in a V (r and 2G-1-r), backward split into I and W."""
from mcap.core.schedules.base import Schedule, register


@register
class ZBV(Schedule):
    name, label = "zbv", "ZBV zero bubble"
    help = ("two stages per rank in a V (r and 2G-1-r) with the backward split into inputs "
            "and weights (torch's ScheduleZBVZeroBubble)")
    torch_class = "ScheduleZBVZeroBubble"
    stages_per_rank = "two"
    placement_style = "v"
    split_backward = True
    default_virtual = 2
    color = "#8c564b"
