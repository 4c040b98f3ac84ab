"""What a finished job's panel says (pages/_jobs.py): a cancelled job that finished no run
says so (issue 38, item 7: "the runs it finished are kept" was said when 0 had finished)."""
from __future__ import annotations

from types import SimpleNamespace

from mcap.core.types import Run
from pages._jobs import cancelled_note

RUN = Run((1, 1), "ok", (10, 20), 0.1)


def test_a_cancelled_job_says_how_many_runs_it_left():
    job = SimpleNamespace(id=7)
    assert cancelled_note(job, ()) == ("Job 7 was cancelled before any run finished; nothing "
                                       "of it was stored.")
    assert cancelled_note(job, (RUN,)) == "Job 7 was cancelled; the 1 run it finished is kept " \
                                          "in the store."
    assert "the 3 runs it finished are kept" in cancelled_note(job, (RUN,) * 3)
