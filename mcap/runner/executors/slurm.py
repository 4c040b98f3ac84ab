"""Executor ``slurm``: the stage-alone measurements of a call as one Slurm job array
(submitit), each array task a fresh process (``mcap.runner.fresh``) with ``--threads`` CPUs
or GPUs per task, in a partition, under a time limit and an array parallelism cap (issue
42).

submitit writes each task's pickled result into a folder the nodes share
(``--slurm-folder``, default ``.mcap/slurm``); the driver reads them as they appear and
follows the tasks with ``squeue`` (no accounting daemon is needed: ``sacct`` is not used).
A task that ended without a result (cancelled, its node failed, killed, out of memory) is
lost and sent again (``--retries``). Every task is written down in the folder's ledger
(``ledger.jsonl``: what it measures and its job id), so a driver killed mid-sweep and run
again adopts the tasks still queued, running or finished instead of sending them twice, and
tidies the files of results it had stored but not yet taken away (each line names its driver).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Optional

from mcap.core.errors import McapError
from mcap.files import owned
from mcap.runner.executors import ledger
from mcap.runner.executors.base import QUEUE_TIMEOUT, RETRIES, Executor, Flag, register
from mcap.runner.executors.remote import Backend, Finished, Lost, Started

PARTITION = Flag("--slurm-partition", "MCAP_SLURM_PARTITION", "the partition the array "
                 "goes to (default: the cluster's default)", "NAME")
TIME = Flag("--slurm-time", "MCAP_SLURM_TIME", "each task's time limit in minutes (default 60)",
            "MIN", "count", 60)
GPUS = Flag("--slurm-gpus-per-task", "MCAP_SLURM_GPUS_PER_TASK", "GPUs per task (default 1 "
            "with --device cuda, else 0)", "N", "count", None, zero=True)
PARALLELISM = Flag("--slurm-array-parallelism", "MCAP_SLURM_ARRAY_PARALLELISM", "tasks of the "
                   "array that may run at once (default: as many as the cluster gives)", "N",
                   "count")
FOLDER = Flag("--slurm-folder", "MCAP_SLURM_FOLDER", "where the tasks' files go, on a "
              "filesystem every node shares (default .mcap/slurm)", "DIR")
_REPO = Path(__file__).resolve().parents[3]
# squeue states of a task that ended without a result: it is lost (sent again)
ENDED = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED",
         "BOOT_FAIL", "DEADLINE", "COMPLETED", "REVOKED", "SPECIAL_EXIT")


@register
class Slurm(Executor):
    name = "slurm"
    label = "Slurm (a job array per call)"
    help = ("the stage-alone measurements as a Slurm job array through submitit, each task a "
            "fresh process")
    remote = True
    needs = "submitit"
    flags = (PARTITION, TIME, GPUS, PARALLELISM, FOLDER, RETRIES, QUEUE_TIMEOUT)

    def check(self, settings) -> None:
        super().check(settings)
        if shutil.which("sbatch") is None:
            raise McapError("executor slurm needs Slurm's sbatch on PATH, and none was found "
                            f"(PATH={os.environ.get('PATH', '')[:200]}); install slurm-wlm "
                            "(bin/slurm-local install) or use --executor local")

    def pool(self, spec, setup, settings, *, world, timeout, startup_timeout, group, alone):
        from mcap.runner.executors.remote import RemotePool
        self.check(settings)
        return RemotePool(self, settings, spec, setup, timeout=timeout,
                          startup_timeout=startup_timeout,
                          backend=lambda: SlurmBackend(settings, spec, setup))


def run_task(kind: str, spec: str, setup, job):
    """The body of one array task (a fresh process started by srun)."""
    from mcap.runner import fresh
    if kind == "probe":
        return fresh.probe(spec, setup)
    return fresh.measure(spec, setup, job)


def _squeue(job_ids: list[str]) -> dict:
    """{job id: (state, node, reason)} of the given array tasks, finished ones too."""
    if not job_ids:
        return {}
    out = subprocess.run(["squeue", "-h", "-r", "-t", "all", "-j", ",".join(sorted(
        {j.split("_")[0] for j in job_ids})), "-o", "%i|%T|%N|%r"],
        capture_output=True, text=True, timeout=60)
    found = {}
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            found[parts[0]] = (parts[1], parts[2], parts[3])
    return found


def _sinfo() -> list[tuple[str, str, str, int]]:
    """(partition, availability, gres, cpus) per partition line of ``sinfo``."""
    out = subprocess.run(["sinfo", "-h", "-o", "%P|%a|%G|%c"], capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        said = out.stderr.strip()[:300] or "no output"
        raise McapError(f"executor slurm: sinfo failed ({said}); is SLURM_CONF set and the "
                        "cluster up?")
    rows = []
    for line in out.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4:
            cpus = int(parts[3].rstrip("+")) if parts[3].rstrip("+").isdigit() else 0
            rows.append((parts[0], parts[1], parts[2], cpus))
    return rows


class SlurmBackend(Backend):
    """submitit's job arrays and squeue (module docstring)."""
    name = "slurm"

    def __init__(self, settings, spec: str, setup):
        self.settings, self.spec, self.setup = settings, spec, setup
        self.partition: Optional[str] = settings.get("slurm_partition")
        gpus = settings.get("slurm_gpus_per_task")
        self.gpus = int(gpus) if gpus is not None else (1 if setup.device == "cuda" else 0)
        self.cpus = 1 if self.gpus else int(setup.threads)
        folder = settings.get("slurm_folder") or os.path.join(".mcap", "slurm")
        self.folder = Path(folder).resolve()
        self.jobs: dict = {}  # key -> submitit Job
        self.started: dict = {}  # key -> node
        self.executor = None
        self._rows: list = []
        self._first_seen: dict = {}  # key -> when a job squeue does not list yet is lost
        self._completed: set = set()  # keys squeue said COMPLETED before their result came
        self._mine: set = set()  # job ids this driver sent or adopted (close() tidies them)
        self._read_ids: dict = {}  # key -> job id of a result read, until it is stored
        self._ledger = ledger.Ledger(self.folder / "ledger.jsonl")
        self._orphans: set = set()  # job ids a killed driver stored and left (_adoptable)

    def asks(self) -> str:
        return f"{self.gpus} GPU" if self.gpus else f"{self.cpus} CPU"

    def resources(self) -> str:
        return "; ".join(f"partition {p} ({a}, {c} CPUs per node, gres {g})"
                         for p, a, g, c in self._rows)

    def connect(self, deadline: float) -> None:
        import logging

        import submitit
        logging.getLogger("submitit").setLevel(logging.ERROR)  # no sacct here: squeue follows
        self._rows = _sinfo()
        names = {p.rstrip("*"): p for p, *_ in self._rows}
        part = self.partition or next((p.rstrip("*") for p, *_ in self._rows
                                       if p.endswith("*")), None)
        if part is None or part not in names:
            raise McapError(f"executor slurm: no partition {self.partition or '(default)'}; "
                            f"the cluster has {', '.join(sorted(names)) or 'none'}")
        rows = [r for r in self._rows if r[0].rstrip("*") == part]
        if self.gpus and not any("gpu" in r[2] for r in rows):
            raise McapError(f"executor slurm: each task asks {self.gpus} GPU but partition "
                            f"{part} has no GPU resources (gres {rows[0][2]})")
        if self.cpus > max(r[3] for r in rows):
            raise McapError(f"executor slurm: each task asks {self.cpus} CPUs (--threads) but "
                            f"no node of partition {part} has that many ({self.resources()})")
        owned.folder(self.folder, "the Slurm folder (--slurm-folder)")
        self._ledger.exists()  # a link or another user's file there: refused before any job
        ex = submitit.SlurmExecutor(folder=str(self.folder / "%j"), max_num_timeout=0)
        params = dict(time=int(self.settings.get("slurm_time") or 60),
                      cpus_per_task=self.cpus, job_name="mcap", setup=self._setup_lines(),
                      signal_delay_s=5)
        if self.partition:
            params["partition"] = self.partition
        if self.gpus:
            params["gpus_per_task"] = self.gpus
        if self.settings.get("slurm_array_parallelism"):
            params["array_parallelism"] = int(self.settings.get("slurm_array_parallelism"))
        ex.update_parameters(**params)
        self.executor = ex

    def _setup_lines(self) -> list[str]:
        """The task's environment, set before its process starts (threads, malloc)."""
        import shlex

        from mcap.runner.machine import process_env
        env = dict(process_env(self.setup.threads))
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), os.getcwd(),
                                                        os.environ.get("PYTHONPATH", "")) if p)
        for name in ("TORCH_EXTENSIONS_DIR", "MCAP_CACHE_DIR"):
            if os.environ.get(name):
                env[name] = os.environ[name]
        return [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]

    # ---- the ledger: what each submitted job measures -------------------------------------
    def _content(self, task) -> str:
        job = task.job
        text = repr((self.spec, self.setup, task.kind, None if job is None else
                     (job.balance, job.stage, None if job.press is None else job.press.plan)))
        return hashlib.sha256(text.encode()).hexdigest()[:24]

    def _sweep(self) -> str:
        """What this driver measures (model and setup), for the ledger's lines."""
        return hashlib.sha256(repr((self.spec, self.setup)).encode()).hexdigest()[:24]

    def _adoptable(self) -> dict:
        """{content: job id} of the ledger's jobs still queued, running or with a result;
        ``self._orphans``: those of them with a result, of this model and setup, whose driver
        (on this host) is gone: if this driver does not ask for one, that driver had stored
        it and was killed before it tidied its files (``forget``)."""
        entries = self._ledger.entries()
        states = _squeue([e.job for e in entries.values()])
        out, dead = {}, set()
        for content, e in entries.items():
            state = states.get(e.job, ("", "", ""))[0]
            done = self._result_path(e.job).exists()
            if state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING") or done:
                out[content] = e.job
                if done and e.sweep == self._sweep() and ledger.gone(e.owner):
                    self._orphans.add(e.job)
            elif state:  # ended without a result (killed, failed): sent again, so tidied now
                dead.add(e.job)
        for job_id in dead:
            shutil.rmtree(self.folder / job_id, ignore_errors=True)
        self._ledger.drop(dead)
        return out

    def _result_path(self, job_id: str) -> Path:
        return self.folder / job_id / f"{job_id}_0_result.pkl"

    def submit(self, tasks) -> None:
        import submitit
        adopt = self._adoptable()
        new, adopted = [], 0
        for t in tasks:
            job_id = adopt.pop(self._content(t), None)
            if job_id is not None:  # sent by a driver killed before: follow that job
                self.jobs[t.key] = submitit.SlurmJob(folder=str(self.folder / "%j"),
                                                     job_id=job_id)
                self._mine.add(job_id)
                adopted += 1
            else:
                new.append(t)
        # the results a killed driver stored but did not tidy: this driver's to tidy (close)
        self._mine.update(self._orphans & set(adopt.values()))
        if adopted:
            import sys
            print(f"mcap: executor slurm: adopted {adopted} task(s) a driver before this one "
                  f"sent ({self._ledger.path})", file=sys.stderr, flush=True)
        if not new:
            return
        try:
            with self.executor.batch():
                jobs = [self.executor.submit(run_task, t.kind, self.spec, self.setup, t.job)
                        for t in new]
        except Exception as exc:  # noqa: BLE001 (sbatch's refusal, named)
            said = str(exc).strip().splitlines()[-1][:400] if str(exc).strip() else repr(exc)
            raise McapError(f"executor slurm: sbatch refused the array: {said}") from None
        for t, job in zip(new, jobs):
            self.jobs[t.key] = job
            self._mine.add(job.job_id)
        self._ledger.add(((self._content(t), job.job_id) for t, job in zip(new, jobs)),
                         self._sweep())

    def poll(self, timeout: float) -> list:
        time.sleep(min(timeout, 0.5))
        out = []
        states = _squeue([j.job_id for j in self.jobs.values()])
        for key, job in list(self.jobs.items()):
            state, node, reason = states.get(job.job_id, ("", "", ""))
            if state == "RUNNING" and key not in self.started:
                self.started[key] = node
                out.append(Started(key, node))
            result = self._result_path(job.job_id)
            if result.exists():
                outcome = self._read(job, key)
                if outcome is not None:
                    out.append(outcome)
                continue
            if state in ENDED or (not state and time.monotonic() > self._grace(key)):
                # ended without a result (a COMPLETED one may still be writing it: once more)
                if state == "COMPLETED" and key not in self._completed:
                    self._completed.add(key)
                    continue
                self.jobs.pop(key)
                why = f"Slurm job {job.job_id} ended {state or 'unlisted'}"
                if reason and reason != "None":
                    why += f" ({reason})"
                tail = _tail(job.paths.stderr)
                out.append(Lost(key, node or self.started.get(key), why + (f": {tail}" if tail
                                                                           else "")))
        return out

    def _grace(self, key: str) -> float:
        """A job squeue does not list yet (just submitted) is given a minute."""
        return self._first_seen.setdefault(key, time.monotonic() + 60.0)

    def _read(self, job, key: str):
        from submitit.core.utils import pickle_load
        try:
            outcome, value = pickle_load(self._result_path(job.job_id))
        except Exception:  # noqa: BLE001 (still being written: next poll)
            return None
        self.jobs.pop(key, None)
        self._read_ids[key] = job.job_id  # its files go once the driver stored it (forget)
        node = self.started.get(key)
        if outcome != "success":
            last = str(value).strip().splitlines()[-1][:300] if str(value).strip() else ""
            return Lost(key, node, f"the task raised {last}")
        return Finished(key, value)

    def forget(self, key: str) -> None:
        """The driver stored this task's result: its folder and ledger line go (a driver
        killed before this adopts the job again and reads the result again)."""
        job_id = self._read_ids.pop(key, None)
        if job_id is None:
            return
        shutil.rmtree(self.folder / job_id, ignore_errors=True)
        self._ledger.drop({job_id})

    def waiting(self, keys) -> str:
        jobs = [self.jobs[k].job_id for k in keys if k in self.jobs]
        reasons = {r for s, _, r in _squeue(jobs).values() if s == "PENDING" and r}
        return f"squeue says {', '.join(sorted(reasons))}" if reasons else ""

    def cancel(self, keys) -> None:
        ids = [self.jobs.pop(k).job_id for k in keys if k in self.jobs]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=60)

    def close(self) -> None:
        """Cancel what is still queued or running, and take this driver's files away: its
        arrays' folders and its lines of the ledger (another driver's stay)."""
        self.cancel(list(self.jobs))
        mine = self._mine
        for job_id in mine:
            shutil.rmtree(self.folder / job_id, ignore_errors=True)
        for array in {j.split("_")[0] for j in mine}:
            shutil.rmtree(self.folder / array, ignore_errors=True)
        for link in self.folder.glob(".submission_file_*.sh"):
            if not link.exists():  # its target folder is gone
                link.unlink(missing_ok=True)
        self._ledger.drop(mine)


def _tail(path: Path) -> str:
    try:
        lines = [ln for ln in Path(path).read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1].strip()[:300] if lines else ""
