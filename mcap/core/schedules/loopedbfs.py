"""Looped BFS (Lamy-Poirier 2023, breadth-first pipelining): ``ScheduleLoopedBFS``, every
micro-batch through a rank's first local stage before its next one."""
from mcap.core.schedules.base import Schedule, register


@register
class LoopedBFS(Schedule):
    name, label = "looped-bfs", "looped BFS"
    help = ("V stages per rank (r, r+G, ...), breadth first: all micro-batches through one "
            "local stage, then the next, like GPipe per stage (torch's ScheduleLoopedBFS)")
    torch_class = "ScheduleLoopedBFS"
    stages_per_rank = "many"
    default_virtual = 2
    color = "#d62728"
