"""DualPipeV (DeepSeek-V3's DualPipe, in its V form): ``ScheduleDualPipeV``, two stages per
rank in a V, forwards of one overlapped with backwards of the other."""
from mcap.core.schedules.base import Schedule, register


@register
class DualPipeV(Schedule):
    name, label = "dualpipev", "DualPipeV"
    help = ("two stages per rank in a V (r and 2G-1-r), a forward of one overlapped with a "
            "backward of the other, backward split into inputs and weights in places "
            "(torch's ScheduleDualPipeV)")
    torch_class = "ScheduleDualPipeV"
    stages_per_rank = "two"
    placement_style = "v"
    split_backward = True
    microbatch_rule = "at_least_virtual_stages"
    default_virtual = 2
    color = "#e377c2"
