"""How far an executor's tasks are, by node (issue 42, item 4): the progress line of a
command that measures, which a dashboard job's log carries to the Profile page
(``mcap.app.jobs.JobProgress.tasks``).

Pure: no torch, no files. An executor (``mcap.runner.executors``) counts its stage-alone
measurement tasks as they are queued, start on a node, end there, or fail for good; the
command prints :meth:`TaskTally.describe` on its progress line.
"""
from __future__ import annotations

from dataclasses import dataclass

Counts = tuple[tuple[str, int], ...]  # (node, tasks), sorted by node


@dataclass(frozen=True)
class TaskTally:
    """Tasks done (ended with a result: ok, oom or failed), running and failed for good,
    each by node, and queued (not started anywhere yet); ``retried``: tasks sent again
    after their process or node was lost."""
    done: Counts = ()
    running: Counts = ()
    queued: int = 0
    failed: Counts = ()
    retried: int = 0

    @property
    def total_done(self) -> int:
        return sum(n for _, n in self.done)

    @property
    def total_running(self) -> int:
        return sum(n for _, n in self.running)

    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted({n for n, _ in self.done + self.running + self.failed}))

    def describe(self) -> str:
        """``tasks: 7 done (n1 4, n2 3), 2 running (n1 1, n2 1), 5 queued``."""
        def part(label: str, counts: Counts) -> str:
            total = sum(n for _, n in counts)
            by = f" ({', '.join(f'{node} {n}' for node, n in counts)})" if counts else ""
            return f"{total} {label}{by}"
        out = [part("done", self.done), part("running", self.running), f"{self.queued} queued"]
        if self.failed:
            out.append(part("failed", self.failed))
        if self.retried:
            out.append(f"{self.retried} retried")
        return "tasks: " + ", ".join(out)


def counts(by_node: dict) -> Counts:
    """A {node: n} dict as sorted counts, zeros left out."""
    return tuple(sorted((str(k), int(v)) for k, v in by_node.items() if v))
