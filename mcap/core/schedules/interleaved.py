"""Interleaved 1F1B (Megatron's virtual pipeline; Narayanan et al. 2021):
``ScheduleInterleaved1F1B``, V stages per rank looped r, r+G, ..."""
from mcap.core.schedules.base import Schedule, register


@register
class Interleaved1F1B(Schedule):
    name, label = "interleaved-1f1b", "interleaved 1F1B"
    help = ("V stages per rank (r, r+G, ...), depth first: a smaller bubble than 1F1B, more "
            "warm-up forwards in flight (torch's ScheduleInterleaved1F1B)")
    torch_class = "ScheduleInterleaved1F1B"
    stages_per_rank = "many"
    microbatch_rule = "rounds"
    default_virtual = 2
    color = "#2ca02c"
