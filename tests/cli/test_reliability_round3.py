"""Reliability, round 3 (issue 38): data files that drove allocations of tens of GiB, any
exception from torch or the system as one line, paths no file can have, and one rule for
digits. Each case failed before (a traceback, a wrong message, or a value taken silently)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from mcap.cli.main import main
from tests.conftest import DATA, REPO, cli

PROFILE = DATA / "vgg11-cpu4.profile.json"
SWEEP = DATA / "vgg11-cpu4-sample300.sweep.json"
PRESS_PROFILE = DATA / "vgg11-b8-never-cpu4-press.profile.json"
TINY = "gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8"


def _edited(tmp_path, source, name, **setup):
    d = json.loads(source.read_text())
    d["setup"].update(setup)
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return path


# --- item 2: activations counted on the meta device before anything is allocated ---------

def test_a_file_batch_size_that_would_need_hundreds_of_gib_is_refused_before_allocating(
        capsys, tmp_path, monkeypatch):
    import torch
    import mcap.models.build as build
    big = _edited(tmp_path, PROFILE, "big.profile.json", batch_size=2**20)
    real_build = build.build_model

    def meta_only(spec, device=None, *a, **k):  # nothing may be built on a real device
        assert device == "meta", f"built {spec} on {device}"
        return real_build(spec, device, *a, **k)
    monkeypatch.setattr(build, "build_model", meta_only)
    started = time.process_time()
    code, _, err = cli(capsys, "recommend", "--profile", big, "--stages", "4", "--method", "time")
    assert time.process_time() - started < 30
    assert code == 2 and "on a micro-batch of 262,144" in err and "GiB" in err
    assert "more than the" in err and "available on this machine" in err
    assert torch.get_default_device().type == "cpu"


def test_evaluate_leaves_the_time_baseline_out_with_the_reason(capsys, tmp_path):
    big = _edited(tmp_path, PROFILE, "big.profile.json", batch_size=2**20)
    sweep = _edited(tmp_path, SWEEP, "big.sweep.json", batch_size=2**20)
    code, out, err = cli(capsys, "evaluate", "--profile", big, "--sweep", sweep)
    assert code == 0 and "time unavailable" in out and "on a micro-batch of 262,144" in out


def test_a_spec_that_builds_another_model_than_the_file_lists_is_named_before_timing(capsys,
                                                                                      tmp_path):
    d = json.loads(PROFILE.read_text())
    d["model"]["spec"] = "gpt:layers=4"  # 6 layers; the file lists VGG11's 30
    other = tmp_path / "other.profile.json"
    other.write_text(json.dumps(d))
    code, _, err = cli(capsys, "recommend", "--profile", other, "--stages", "4", "--method",
                       "time")
    assert code == 2 and "the profile is inconsistent" in err
    assert "builds 6 layers but its layer list has 30" in err


# --- main(): one line for anything torch or the system raises; exit 1 for a bug -----------

@pytest.mark.parametrize("raised,code,needle", [
    (RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate "
                  "memory: you tried to allocate 68719476736 bytes"), 2, "torch refused it"),
    (ValueError("from torch"), 2, "torch refused it"),
    (MemoryError(), 2, "out of memory"),
    (OSError(36, "File name too long", "x" * 5000), 2, "the system refused: File name too long"),
    (TypeError("unsupported operand"), 1, "internal error: TypeError: unsupported operand"),
])
def test_any_exception_is_one_line(capsys, monkeypatch, raised, code, needle):
    import mcap.core.recommend as rec

    def boom(*a, **k):
        if str(raised) == "from torch":  # a real error of torch's, raised inside torch
            import torch
            torch.nn.Linear(2, 2)(torch.empty(1, 3))
        raise raised
    monkeypatch.setattr(rec, "recommend", boom)
    got = main(["recommend", "--profile", str(PROFILE), "--stages", "4"])
    err = capsys.readouterr().err
    assert got == code and needle.split(":")[0] in err and err.count("\n") == 1, err
    assert "Traceback" not in err and len(err) < 600
    if code == 1:
        assert "MCAP_TRACEBACK=1" in err and "bug in mcap" in err


def test_a_traceback_on_request(capsys, monkeypatch):
    import mcap.core.recommend as rec
    monkeypatch.setattr(rec, "recommend", lambda *a, **k: {}["missing"])
    monkeypatch.setenv("MCAP_TRACEBACK", "1")
    assert main(["recommend", "--profile", str(PROFILE), "--stages", "4"]) == 1
    assert "Traceback" in capsys.readouterr().err


# --- item 3: every path option, a path no file can have -----------------------------------

LONG = "/".join(["d" * 200] * 25) + ".json"   # 5,030 bytes: over PATH_MAX
WIDE = "n" * 300 + ".json"                    # one name of 305 bytes: over NAME_MAX


def path_cases(tmp_path):
    out = tmp_path / "o.json"
    return [
        ("--out", ["press", "--profile", PRESS_PROFILE, "--balance", "8,8,7,7", "--capacity",
                   "400MiB", "--out", "{}"]),
        ("--out", ["scale", "--model", TINY, "--vary", "hidden", "--low", "16", "--high", "32",
                   "--stages", "2", "--capacity", "1GiB", "--out", "{}"]),
        ("--out", ["sweep", "--model", TINY, "--stages", "2", "--out", "{}"]),
        ("--out", ["profile", "--model", TINY, "--stages", "2", "--out", "{}"]),
        ("--out", ["export", "--profile", "1", "--out", "{}"]),
        ("--store", ["measure", "--model", TINY, "--balance", "2,2", "--store", "{}"]),
        ("--store", ["export", "--profile", "1", "--out", out, "--store", "{}"]),
        ("--profile", ["predict", "--profile", "{}", "--balance", "3,3"]),
        ("--profile", ["recommend", "--profile", "{}", "--stages", "2"]),
        ("--profile", ["evaluate", "--profile", "{}", "--sweep", SWEEP]),
        ("--profile", ["press", "--profile", "{}", "--balance", "3,3", "--capacity", "1GiB"]),
        ("--sweep", ["evaluate", "--profile", PROFILE, "--sweep", "{}"]),
        ("--press", ["measure", "--model", TINY, "--balance", "2,2", "--press", "{}"]),
        ("--for", ["predict", "--profile", PROFILE, "--balance", "8,8,7,7", "--for", "{}"]),
    ]


@pytest.mark.parametrize("case", range(14))
@pytest.mark.parametrize("bad,needle", [(LONG, "above the system's limit of 4,095 bytes"),
                                        (WIDE, "has a name of 305 bytes"),
                                        ("a\x00b.json", "NUL character"),
                                        ("", "empty")])
def test_every_path_option_names_a_path_no_file_can_have(capsys, tmp_path, monkeypatch, case,
                                                         bad, needle):
    monkeypatch.chdir(tmp_path)
    flag, argv = path_cases(tmp_path)[case]
    if flag == "--for" and bad and not bad.endswith(".json"):
        bad += ".json"
    code, out, err = cli(capsys, *[bad if a == "{}" else a for a in argv])
    assert code == 2 and needle in err, (flag, err)
    assert len(err) < 700 and "Traceback" not in err  # the path cut, its length named
    assert list(tmp_path.iterdir()) == []


def test_an_empty_profile_is_called_empty_not_a_folder(capsys):
    code, _, err = cli(capsys, "predict", "--profile", "", "--balance", "3,3")
    assert code == 2 and "empty" in err and "folder" not in err and ".:" not in err


# --- item 7: one rule for digits, ASCII only -----------------------------------------------

@pytest.mark.parametrize("argv,needle", [
    (["predict", "--profile", PROFILE, "--balance", "٣,3,5,19"], "ASCII digits"),
    (["plan", "--layers", "٣٠", "--stages", "4"], "must be an integer"),
    (["measure", "--model", "gpt:layers=٣", "--balance", "2,3"], "layers must be an integer"),
    (["measure", "--model", TINY, "--balance", "2,2", "--threads", "٣"], "whole number"),
    (["measure", "--model", TINY, "--balance", "2,2", "--timeout", "٣٠"], "must be a number"),
    (["recommend", "--profile", PROFILE, "--stages", "4", "--tie-tolerance", "٠.٥"],
     "must be a number"),
    (["scale", "--model", TINY, "--vary", "hidden", "--low", "١٦", "--high", "32", "--stages",
      "2", "--capacity", "1GiB"], "must be an integer"),
    (["measure", "--model", TINY, "--balance", "2,2", "--nnodes", "2", "--rdzv-endpoint",
      "node0:٢٩٥٠٠"], "expected HOST:PORT"),
    (["measure", "--model", TINY, "--balance", "2,2", "--capacity", "٣GiB"], "is not a size"),
    (["predict", "--profile", PROFILE, "--plan", "30:tp٢"], "plan"),
    (["profile", "--model", TINY, "--stages", "2", "--out", "x.json", "--capture",
      "--profile-batch-sizes", "٨,16"], "batch sizes"),
])
def test_a_number_in_other_digits_is_refused_everywhere(capsys, tmp_path, monkeypatch, argv,
                                                        needle):
    monkeypatch.chdir(tmp_path)
    code, out, err = cli(capsys, *argv)
    assert code == 2 and needle in err, err


def test_a_real_process_gets_one_line_for_a_long_out():
    proc = subprocess.run([sys.executable, "-m", "mcap", "press", "--profile",
                           str(PRESS_PROFILE), "--balance", "8,8,7,7", "--capacity", "400MiB",
                           "--out", WIDE], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr
