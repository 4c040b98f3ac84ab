"""GPipe (fill-drain): every forward, then every backward (``ScheduleGPipe``)."""
from mcap.core.schedules.base import Schedule, register


@register
class GPipe(Schedule):
    name, label = "gpipe", "GPipe"
    help = ("fill-drain: all M forwards, then all backwards; every stage holds all M "
            "micro-batches at once (torch's ScheduleGPipe, the mCAP paper's schedule)")
    torch_class = "ScheduleGPipe"
    color = "#1f77b4"
