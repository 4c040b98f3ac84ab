"""Interleaved zero bubble (ZB1P; Qi et al. 2024): ``ScheduleInterleavedZeroBubble``, the
backward split into inputs (I) and weights (W), W filling the bubbles."""
from mcap.core.schedules.base import Schedule, register


@register
class InterleavedZeroBubble(Schedule):
    name, label = "interleaved-zb", "interleaved zero bubble"
    help = ("V stages per rank (r, r+G, ...) with the backward split into inputs (I) and "
            "weights (W); what W needs stays until W runs (torch's "
            "ScheduleInterleavedZeroBubble, ZB1P)")
    torch_class = "ScheduleInterleavedZeroBubble"
    stages_per_rank = "many"
    split_backward = True
    microbatch_rule = "rounds"
    default_virtual = 2
    color = "#9467bd"
