"""The driver side every cluster executor shares (``mcap.runner.executors.remote``), over a
toy executor registered here: each task a fresh ``python`` process on this machine running
``mcap.runner.fresh`` for real (issue 42). It checks what does not depend on Ray or Slurm:
a toy registers as one class and reaches the CLI, results of machines with different
fingerprints are refused naming both (a task's oneDNN ISA cap changes its fingerprint for
real), a lost process is sent again a bounded number of times and then stored failed with
its node and error, and a run's peaks equal the local pool's to the byte."""
from __future__ import annotations

import os
import pickle
import signal
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from mcap.runner.executors.remote import Backend, Finished, Lost, RemotePool, Started
from tests.conftest import REPO

MODEL = "gpt:layers=1,hidden=32,vocab=64,seq=16"  # 3 layers: 4 stage keys on 2 stages
ARGS = ["--model", MODEL, "--stages", "2", "--batch-size", "4", "--chunks", "2"]
_TASK = ("import pickle, sys\n"
         "from mcap.runner import fresh\n"
         "kind, spec, setup, job, out = pickle.load(sys.stdin.buffer)\n"
         "res = fresh.probe(spec, setup, 'toy') if kind == 'probe' else "
         "fresh.measure(spec, setup, job, 'toy')\n"
         "open(out, 'wb').write(pickle.dumps(res))\n")


class Processes(Backend):
    """Each task a fresh process of this machine (a toy cluster of one node, 'toy').
    ``isa(index)``: the oneDNN ISA cap of the index-th measurement (a different machine);
    ``kill``: measurement indices whose first try is killed."""
    name = "procs"

    def __init__(self, spec, setup, isa=lambda i: None, kill=()):
        from mcap.runner.machine import process_env
        self.spec, self.setup, self.isa, self.kill = spec, setup, isa, set(kill)
        self.env = {**os.environ, **process_env(setup.threads),
                    "PYTHONPATH": str(REPO)}
        self.procs: dict = {}
        self.tries: dict = {}
        self.tmp = tempfile.mkdtemp(prefix="mcap-procs-")

    def submit(self, tasks):
        for t in tasks:
            index = int(t.key.split(":")[1]) if t.kind == "measure" else -1
            self.tries[t.key] = self.tries.get(t.key, 0) + 1
            env = dict(self.env)
            if self.isa(index):
                env["ONEDNN_MAX_CPU_ISA"] = self.isa(index)
            out = os.path.join(self.tmp, f"{t.key.replace(':', '-')}-{self.tries[t.key]}")
            p = subprocess.Popen([sys.executable, "-c", _TASK], stdin=subprocess.PIPE, env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            p.stdin.write(pickle.dumps((t.kind, self.spec, self.setup, t.job, out)))
            p.stdin.close()
            if index in self.kill and self.tries[t.key] == 1:
                p.send_signal(signal.SIGKILL)  # lost before it could answer
            self.procs[t.key] = (p, out, False)

    def poll(self, timeout):
        import time
        time.sleep(min(timeout, 0.1))
        events = []
        for key, (p, out, told) in list(self.procs.items()):
            if not told:
                self.procs[key] = (p, out, True)
                events.append(Started(key, "toy"))
            if p.poll() is None:
                continue
            del self.procs[key]
            if p.returncode == 0:
                events.append(Finished(key, pickle.loads(Path(out).read_bytes())))
            else:
                events.append(Lost(key, "toy", f"the process was killed by signal "
                                                f"{-p.returncode}"))
        return events

    def cancel(self, keys):
        for k in keys:
            got = self.procs.pop(k, None)
            if got:
                got[0].kill()
                got[0].wait()

    def close(self):
        self.cancel(list(self.procs))


@pytest.fixture
def toy_executor(monkeypatch):
    """Executor ``procs`` registered for the test (taken out after), with its backend's
    knobs settable through ``knobs``."""
    from mcap.runner import executors
    from mcap.runner.executors.base import QUEUE_TIMEOUT, RETRIES, Executor, Flag
    knobs = {}

    class Procs(Executor):
        name = "procs"
        label = "toy: a process per task"
        help = "each measurement a fresh process of this machine (a test's toy)"
        remote = True
        flags = (Flag("--toy-knob", "MCAP_TOY_KNOB", "a toy's own option"), RETRIES,
                 QUEUE_TIMEOUT)

        def pool(self, spec, setup, settings, **kw):
            return RemotePool(self, settings, spec, setup, timeout=kw["timeout"],
                              startup_timeout=kw["startup_timeout"],
                              backend=lambda: Processes(spec, setup, **knobs))
    executors.register(Procs)
    try:
        yield knobs
    finally:
        executors.REGISTRY.unregister("procs")


def _main(args, capsys):
    from mcap.cli.main import main
    code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_a_toy_executor_is_one_class_and_reaches_the_cli(toy_executor, tmp_path, capsys):
    from mcap.cli.main import build_parser
    text = build_parser()._subparsers._group_actions[0].choices["sweep"].format_help()
    assert "procs" in text and "--toy-knob" in text and "$MCAP_TOY_KNOB" in text
    code, _, err = _main(["measure", *ARGS[:2], "--balance", "2,1", "--executor", "procs",
                          "--ray-address", "127.0.0.1:6379", "--store",
                          str(tmp_path / "s.db")], capsys)
    assert code == 2 and "--ray-address applies to another executor, not --executor procs" in err


@pytest.mark.integration
def test_fingerprints_that_differ_are_refused_naming_both(toy_executor, tmp_path, capsys):
    toy_executor["isa"] = lambda i: "AVX" if i % 2 else None  # odd tasks: another machine
    store = tmp_path / "s.db"
    code, _, err = _main(["sweep", *ARGS, "--store", str(store), "--out",
                          str(tmp_path / "s.sweep.json"), "--executor", "procs"], capsys)
    assert code == 2, err
    assert "executor procs: the tasks ran on machines of different fingerprints" in err
    assert "oneDNN max AVX" in err and "Traceback" not in err
    assert not (tmp_path / "s.sweep.json").exists()
    with sqlite3.connect(store) as conn:  # every stage kept, each under its own machine
        machines = conn.execute("SELECT COUNT(*), COUNT(DISTINCT machine) FROM stage_runs"
                                ).fetchone()
    assert machines == (4, 2)


@pytest.mark.integration
def test_a_lost_task_is_sent_again_then_stored_failed_with_its_node(toy_executor, tmp_path,
                                                                    capsys):
    from mcap.runner import open_runner
    from mcap.core.types import Setup
    local = {}
    setup = Setup(stages=2, batch_size=4, chunks=2)
    with open_runner(MODEL, setup) as runner:  # the local pool's truth
        local = runner.measure((2, 1)).peaks
    toy_executor["kill"] = {0}  # the first try of stage 0 is killed: sent again
    code, out, err = _main(["measure", *ARGS[:2], "--batch-size", "4", "--chunks", "2",
                            "--balance", "2,1", "--json", "--executor", "procs",
                            "--store", str(tmp_path / "m.db")], capsys)
    assert code == 0, err
    import json
    assert tuple(json.loads(out)["peaks"]) == local  # to the byte
    assert "1 retried" not in err  # measure prints no progress line; the count is below
    code, _, err = _main(["sweep", *ARGS, "--store", str(tmp_path / "f.db"), "--out",
                          str(tmp_path / "f.sweep.json"), "--executor", "procs",
                          "--retries", "0"], capsys)
    assert code == 0, err
    with sqlite3.connect(tmp_path / "f.db") as conn:
        failed = conn.execute("SELECT error FROM stage_runs WHERE status = 'failed'"
                              ).fetchall()
    assert failed == [("on node toy: the process was killed by signal 9 (tried 1 time)",)]
    assert "1 failed (toy 1)" in err


@pytest.mark.integration
def test_a_hybrid_plan_s_devices_run_as_tasks_read_the_local_bytes(toy_executor, tmp_path,
                                                                   capsys):
    """``measure --plan`` (and so ``profile --parallel``): each device of a CAPTURE plan a
    task of its own, joining its fake world as that rank, as a local slot does."""
    import json
    plan = ["measure", "--model", MODEL, "--plan", "1,2:dp2", "--batch-size", "4",
            "--chunks", "2", "--json"]
    code, local, err = _main([*plan, "--store", str(tmp_path / "l.db")], capsys)
    assert code == 0, err
    code, remote, err = _main([*plan, "--store", str(tmp_path / "r.db"), "--executor",
                               "procs"], capsys)
    assert code == 0, err
    assert json.loads(remote)["peaks"] == json.loads(local)["peaks"]
    assert len(json.loads(remote)["peaks"]) == 3
