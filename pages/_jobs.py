"""Long work for the pages: the CLI flags of a job and its live panel. The child process
itself is started, followed and cancelled by ``mcap.app.jobs`` (never subprocess here)."""
from __future__ import annotations


import streamlit as st

from mcap.core.errors import McapError
from pages._shared import error


@st.cache_resource(show_spinner=False)
def gpu_count() -> int:
    """This machine's CUDA devices, read once per server (``mcap.app.devices``)."""
    from mcap.app.devices import gpu_count as count
    return count()


# --- jobs (child processes; ARCHITECTURE.md: never in the script thread) -------------------------

def setup_args(spec: str, setup) -> list[str]:
    """The CLI flags that reproduce a model spec and a Setup (``mcap.cli.options``):
    ``--engine`` is the pipeline runtime, ``--device`` the device kind."""
    args = ["--model", spec, "--stages", str(setup.stages), "--batch-size", str(setup.batch_size),
            "--chunks", str(setup.chunks), "--schedule", setup.schedule,
            "--checkpoint", setup.checkpoint, "--optimizer", setup.optimizer,
            "--engine", setup.engine, "--device", setup.device]
    if setup.capacity_bytes:
        args += ["--capacity", str(setup.capacity_bytes)]
    if setup.virtual_stages > 1:  # a multi-stage schedule's stages per rank (issue 39)
        args += ["--virtual-stages", str(setup.virtual_stages)]
    if setup.precision != "fp32":
        args += ["--precision", setup.precision]
    return args


def measure_args(profile, balance, device=None) -> list[str]:
    """``measure --model SPEC ... --balance 3,3,5,19`` under the profile's own setup, so the
    run lands in the profile's study and shows up as its measured peak; on ``device`` when
    given (another device is another study)."""
    from dataclasses import replace
    setup = profile.setup if device is None else replace(profile.setup, device=device)
    return [*setup_args(profile.model.spec, setup), "--balance", ",".join(map(str, balance))]


def job_output(s, kind: str) -> str:
    """Where a dashboard job writes its JSON (``mcap.app.jobs.output_path``: unique per
    store and job)."""
    from mcap.app import jobs
    return str(jobs.output_path(s, kind))


def job_panel(s, job_id: int, key: str, every: float = 1.0) -> None:
    """Live progress of a job, polled from the store: runs done of total, current balance,
    the growing table of per-run peaks, a cancel button. Survives page switches because
    the job is a child process and its state lives in the store."""
    from mcap.app import jobs
    from mcap.figures.progress import runs_table
    try:
        finished = s.job(job_id).finished
    except McapError as exc:
        error(exc)
        return

    @st.fragment(run_every=None if finished else every)
    def panel():
        p = jobs.progress(s, job_id)
        job = p.job
        total = job.total or "?"
        now = (f" · now measuring {balance_label(job.current)}"
               if job.current and not job.finished else "")
        st.progress(p.fraction, text=f"{job.kind} job {job.id}: **{job.status}** · {job.done} of "
                                     f"{total} runs{now}")
        if p.tasks is not None:  # the executor's tasks by node (issue 42)
            st.caption(p.tasks, help="stage-alone measurements done, running and queued, by "
                       "the node they ran on (--executor)")
        if p.runs:
            from mcap.figures._style import table_view
            st.dataframe(table_view(runs_table(p.runs), ("peak",)), hide_index=True, key=f"{key}-runs-{job.id}")
        if not job.finished:
            if st.button("⏹️ Cancel", key=f"{key}-cancel-{job.id}"):
                jobs.cancel(s, job.id)
                st.rerun(scope="app")
        elif not finished:  # it finished since the page was drawn: redraw with the new runs
            st.rerun(scope="app")
        if job.status == "failed":
            error(f"Job {job.id} failed: {job.error}")
        elif job.status == "cancelled":
            st.warning(cancelled_note(job, p.runs))
        elif job.status == "done":
            st.success(f"Job {job.id} is done; its results are in the store. " + done_note(job, p.runs))
    panel()


def balance_label(balance) -> str:
    return "-".join(str(int(n)) for n in balance)


def cancelled_note(job, runs) -> str:
    """What a cancelled job leaves (issue 38: "the runs it finished are kept" was said when
    none had finished)."""
    from mcap.core.teaching import plural
    if not runs:
        return (f"Job {job.id} was cancelled before any run finished; nothing of it was "
                "stored.")
    return (f"Job {job.id} was cancelled; the {plural(len(runs), 'run')} it finished "
            f"{'is' if len(runs) == 1 else 'are'} kept in the store.")


def done_note(job, runs) -> str:
    """How many runs a finished job measured, and how many it found measured already."""
    from mcap.core.teaching import plural
    measured = len(runs)
    reused = max(int(job.done or 0) - measured, 0)
    if measured == 0 and reused:
        return (f"All {plural(reused, 'run')} were already in the store (measured before on this "
                "machine) and reused: nothing was measured again.")
    return (f"{plural(measured, 'run')} measured now"
            + (f", {reused} found in the store and reused." if reused else "."))
