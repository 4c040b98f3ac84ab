"""Beyond one machine (issue 15, item 8): ``measure --nnodes 2`` run twice on localhost,
once per node, measures one hybrid plan through torchrun (static ranks by node) and node 0
prints the per-device peaks and records the run."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from mcap.core.errors import McapError
from tests.conftest import REPO

GPT = "gpt:layers=2,hidden=32,heads=2,vocab=64,seq=8"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_options_are_checked():
    import argparse

    from mcap.cli.nodes import spmd_argv
    from mcap.core.capture.plan import parse_plan

    args = argparse.Namespace(nnodes=2, node_rank=0, rdzv_endpoint="127.0.0.1:29500",
                              plan=parse_plan("1,1:dp2,2"), model=GPT, batch_size=8, chunks=2,
                              schedule="gpipe", checkpoint="except_last", optimizer="sgd",
                              device="cpu", threads=1, timeout=60.0, engine="auto",
                              capacity=None)
    argv = spmd_argv(args, 4)
    assert argv[argv.index("--nproc-per-node") + 1] == "2"
    assert argv[argv.index("--plan") + 1] == "1,1:dp2,2"
    with pytest.raises(McapError, match="3 devices do not split over 2 nodes"):
        spmd_argv(args, 3)
    with pytest.raises(McapError, match="--node-rank 2: expected 0..1"):
        spmd_argv(argparse.Namespace(**{**vars(args), "node_rank": 2}), 4)
    with pytest.raises(McapError, match="expected HOST:PORT"):
        spmd_argv(argparse.Namespace(**{**vars(args), "rdzv_endpoint": "nohost"}), 4)


def test_a_node_starts_no_more_processes_than_it_may(monkeypatch):
    """This node's share of the ranks is refused over the CPU process cap before torchrun
    starts (mcap.runner.engines.base.check_processes), and allowed when raised."""
    import argparse

    from mcap.cli.nodes import spmd_argv
    from mcap.core.capture.plan import parse_plan

    plan = parse_plan("4:dp256")
    args = argparse.Namespace(nnodes=2, node_rank=0, rdzv_endpoint="127.0.0.1:29500",
                              plan=plan, model=GPT, batch_size=512, chunks=2,
                              schedule="gpipe", checkpoint="except_last", optimizer="sgd",
                              device="cpu", threads=1, timeout=60.0, engine="auto",
                              capacity=None)
    monkeypatch.delenv("MCAP_MAX_CPU_PROCESSES", raising=False)
    with pytest.raises(McapError, match="this node's share of the run needs 128 CPU processes "
                                        ".* at most 64 .* MCAP_MAX_CPU_PROCESSES"):
        spmd_argv(args, plan.devices)
    monkeypatch.setenv("MCAP_MAX_CPU_PROCESSES", "128")
    argv = spmd_argv(args, plan.devices)
    assert argv[argv.index("--nproc-per-node") + 1] == "128"


@pytest.mark.integration
def test_two_nodes_on_localhost(tmp_path):
    from tests.runner.engines.test_hybrid import reference_losses

    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}

    def node(rank):
        return subprocess.Popen(
            [sys.executable, "-m", "mcap", "measure", "--model", GPT, "--plan", "1,1:dp2,2",
             "--batch-size", "8", "--chunks", "2", "--json", "--timeout", "120",
             "--store", str(tmp_path / f"s{rank}.sqlite"), "--nnodes", "2",
             "--node-rank", str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)

    one, zero = node(1), node(0)  # node 1 first: the ranks do not depend on the order
    out0, err0 = zero.communicate(timeout=280)
    out1, err1 = one.communicate(timeout=60)
    assert zero.returncode == 0 and one.returncode == 0, (err0[-2000:], err1[-2000:])
    assert out1.strip() == ""
    got = json.loads(out0)
    assert got["status"] == "ok" and got["plan_text"] == "1,1:dp2,2"
    assert len(got["peaks"]) == 4 and got["peaks"][1] == got["peaks"][2]
    assert got["losses"] == pytest.approx(reference_losses(GPT), rel=1e-5)

    from mcap.store import Store
    with Store(tmp_path / "s0.sqlite") as store:
        (study,) = store.list_studies()
        assert study.setup.engine == "hybrid:pp,dp2,pp"
        (run,) = store.runs(study.id)
        assert run.peaks == (got["peaks"][0], got["peaks"][1], got["peaks"][3])


def test_node_options_are_dropped_from_the_forwarded_command():
    from mcap.cli.nodes import _without_node_options

    argv = ["profile", "--model", GPT, "--nnodes", "2", "--node-rank=1",
            "--rdzv-endpoint", "h:1", "--out", "p.json"]
    assert _without_node_options(argv) == ["profile", "--model", GPT, "--out", "p.json"]


def _profile_on_two_nodes(tmp_path, common) -> None:
    """Run ``python -m mcap *common`` as node 1 and node 0 of a 2-node localhost rendezvous,
    each with its own store (s0/s1.sqlite) and output (p0/p1.json); both must exit 0."""
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}

    def node(rank):
        return subprocess.Popen(
            [sys.executable, "-m", "mcap", *common, "--store", str(tmp_path / f"s{rank}.sqlite"),
             "--out", str(tmp_path / f"p{rank}.json"), "--nnodes", "2", "--node-rank",
             str(rank), "--rdzv-endpoint", f"127.0.0.1:{port}"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)

    one, zero = node(1), node(0)
    _, err0 = zero.communicate(timeout=280)
    _, err1 = one.communicate(timeout=60)
    assert zero.returncode == 0 and one.returncode == 0, (err0[-2000:], err1[-2000:])


@pytest.mark.integration
def test_profile_across_two_nodes_equals_the_local_profile(tmp_path):
    """``profile --nnodes 2`` on localhost: node 0 writes the profile and its store, and on
    CPU its statistics are byte-equal to a one-machine profile of the same setup."""
    model = "gpt:layers=4,hidden=32,heads=2,vocab=64,seq=8"
    common = ["profile", "--model", model, "--stages", "4", "--batch-size", "8", "--chunks",
              "2", "--engine", "pipelining", "--timeout", "120"]
    _profile_on_two_nodes(tmp_path, common)
    assert not (tmp_path / "p1.json").exists()  # node 1 only trains its ranks' stages
    across = json.loads((tmp_path / "p0.json").read_text())

    _equals_local_profile(tmp_path, common, across)

    from mcap.store import Store
    with Store(tmp_path / "s0.sqlite") as store:
        (study,) = store.list_studies()
        assert len(store.runs(study.id)) == len(across["runs"])


@pytest.mark.integration
def test_parallel_profile_across_two_nodes_equals_the_local_profile(tmp_path):
    """``profile --parallel dp --nnodes 2`` on localhost: its pipeline-only and dp2 runs go
    through torchrun on engine hybrid (one rank per device; the whole model as one dp2 stage
    runs on ranks 0-1 while ranks 2-3 only join its sub-group), and node 0's profile equals a
    one-machine profile of the same setup."""
    model = "gpt:layers=4,hidden=32,heads=2,vocab=64,seq=8"  # 6 layers
    common = ["profile", "--model", model, "--stages", "4", "--batch-size", "8", "--chunks",
              "2", "--parallel", "dp", "--timeout", "120"]
    _profile_on_two_nodes(tmp_path, common)
    assert not (tmp_path / "p1.json").exists()
    across = json.loads((tmp_path / "p0.json").read_text())
    assert across["setup"]["engine"] == "hybrid"

    local = _equals_local_profile(tmp_path, common, across)
    (dp2,), (here,) = across["variants"], local["variants"]
    for key in ("batch_size", "parallel", "degree", "mem_isolated", "mem_added"):
        assert dp2[key] == here[key], key
    assert [(r["balance"], r["peaks"]) for r in dp2["runs"]] == \
        [(r["balance"], r["peaks"]) for r in here["runs"]]
    assert (dp2["parallel"], dp2["degree"]) == ("dp", 2)
    assert dp2["runs"][-1]["balance"] == [6]  # the whole model on one sub-mesh of 2


@pytest.mark.parametrize("command", ["measure", "profile", "sweep"])
def test_node_options_without_nnodes_are_refused_naming_them(tmp_path, capsys, command,
                                                             monkeypatch):
    """--node-rank / --rdzv-endpoint without --nnodes ran on this machine as if not given."""
    from mcap.cli.main import main
    from mcap.runner.pool import WorkerPool
    started = []
    monkeypatch.setattr(WorkerPool, "start", lambda self: started.append(self))
    what = {"measure": ["--balance", "2,2"], "profile": ["--stages", "2", "--out",
                                                        str(tmp_path / "p.json")],
            "sweep": ["--stages", "2", "--out", str(tmp_path / "s.json")]}[command]
    base = [command, "--model", GPT, "--batch-size", "8", "--chunks", "2", "--store",
            str(tmp_path / "s.sqlite"), *what]
    for extra, named in ((["--node-rank", "1"], "--node-rank 1 apply only across nodes"),
                         (["--rdzv-endpoint", "h:1"], "--rdzv-endpoint h:1 apply only"),
                         (["--node-rank", "0", "--rdzv-endpoint", "h:1"],
                          "--node-rank 0 and --rdzv-endpoint h:1 apply only across nodes: "
                          "give --nnodes N")):
        assert main(base + extra) == 2
        assert named in capsys.readouterr().err
    assert started == [] and list(tmp_path.glob("*.json")) == []


def test_nodes_refuse_what_runs_on_one_machine(tmp_path, capsys):
    from mcap.cli.main import main

    base = ["--model", GPT, "--stages", "2", "--batch-size", "8", "--nnodes", "2",
            "--node-rank", "0", "--rdzv-endpoint", "127.0.0.1:1", "--store",
            str(tmp_path / "s.sqlite")]
    assert main(["profile", *base, "--engine", "torchgpipe", "--out", str(tmp_path / "p.json")]) == 2
    assert "engine torchgpipe does not run across nodes" in capsys.readouterr().err
    assert main(["sweep", *base, "--stages", "9", "--out", str(tmp_path / "s.json")]) == 2
    assert main(["profile", *base, "--press", "--out", str(tmp_path / "p.json")]) == 2
    assert "cannot be combined with --nnodes" in capsys.readouterr().err
    # --parallel goes across nodes, but a micro-batch its dp2 runs cannot split exits 2 on
    # every node before torchrun starts (port 1 would refuse a rendezvous)
    assert main(["profile", *base, "--stages", "4", "--chunks", "2", "--batch-size", "2",
                 "--parallel", "dp", "--out", str(tmp_path / "p.json")]) == 2
    assert "micro-batch size 1" in capsys.readouterr().err
    assert not (tmp_path / "p.json").exists() and not (tmp_path / "s.json").exists()


def _equals_local_profile(tmp_path, common, across: dict) -> dict:
    """Profile ``common`` on this machine alone and check node 0's profile ``across``
    equals it (setup, machine, statistics, every run's peaks); returns the local one."""
    from mcap.cli.main import main
    assert main([*common, "--store", str(tmp_path / "local.sqlite"),
                 "--out", str(tmp_path / "local.json")]) == 0
    local = json.loads((tmp_path / "local.json").read_text())
    for key in ("setup", "machine", "mem_isolated", "mem_added"):
        assert across[key] == local[key], key
    assert [r["peaks"] for r in across["runs"]] == [r["peaks"] for r in local["runs"]]
    return local
