"""Tasks by node (``mcap.core.tasks``, issue 42): the progress line."""
from __future__ import annotations

from mcap.core.tasks import TaskTally, counts


def test_the_line_counts_tasks_by_node():
    t = TaskTally(counts({"n2": 3, "n1": 4}), counts({"n1": 1, "n2": 0}), 5, counts({"n2": 1}), 2)
    assert t.describe() == ("tasks: 7 done (n1 4, n2 3), 1 running (n1 1), 5 queued, "
                            "1 failed (n2 1), 2 retried")
    assert TaskTally().describe() == "tasks: 0 done, 0 running, 0 queued"
    assert t.nodes() == ("n1", "n2") and t.total_done == 7 and t.total_running == 1
