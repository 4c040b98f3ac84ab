"""Reliability, round 2 (issue 28): outputs compared by real path and checked again before the
write, sizes refused before anything is built or allocated, and the small things a user sees
(a broken pipe, a duplicate spec key, an empty --out, a 97 KB spec, Ctrl-C's wording, the
dashboard's paths and query values). Each case failed before; the causes are tested here."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mcap.cli.main import main
from mcap.core.errors import McapError, SchemaError
from mcap.io import jsonio, outputs
from mcap.store import Store
from tests.conftest import REPO, cli, no_hang

DATA = REPO / "data"
PROFILE = DATA / "vgg11-cpu4.profile.json"
PRESS_PROFILE = DATA / "vgg11-b8-never-cpu4-press.profile.json"
TINY = "gpt:layers=2,hidden=16,heads=2,vocab=32,seq=8"


# --- outputs: one file by its real path, checked again right before the write -------------

def test_out_through_a_symlinked_folder_is_the_store_before_either_exists(capsys, tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    code, _, err = cli(capsys, "sweep", "--model", TINY, "--stages", "2", "--sample", "1",
                       "--store", tmp_path / "link" / "new.sqlite",
                       "--out", real / "new.sqlite")
    assert code == 2 and "is the results store" in err
    assert list(real.iterdir()) == []  # nothing measured, nothing created


def test_the_final_write_checks_the_out_again(tmp_path):
    """Between the check before the runs and the write after them the --out path may have
    become the store (a symlink put there): the write refuses and names the export."""
    store = tmp_path / "store.sqlite"
    with Store(store) as s:
        pid = s.save_profile(jsonio.load_profile(PROFILE))
    out = tmp_path / "p.json"
    outputs.check_out(out, "mcap.profile/1", store=store)  # fine before the runs
    out.symlink_to(store)  # ... then the store behind it
    before = store.read_bytes()
    with pytest.raises(outputs.OutputError, match="is the results store") as caught:
        outputs.write_or_explain(jsonio.load_profile(PROFILE), out, "profile", pid, store)
    assert "export" in str(caught.value) and store.read_bytes() == before


def test_an_empty_out_is_called_empty(capsys, tmp_path):
    code, _, err = cli(capsys, "sweep", "--model", TINY, "--stages", "2", "--out", "",
                       "--store", tmp_path / "s.sqlite")
    assert code == 2 and "--out is empty" in err and "folder" not in err


# --- sizes: refused before building or allocating ---------------------------------------

def _quick(capsys, *argv, cpu_seconds=10.0):
    started = time.process_time()  # this process's CPU seconds, not the machine's load
    code, out, err = cli(capsys, *argv)
    assert time.process_time() - started < cpu_seconds, argv
    return code, err


def test_a_huge_layer_count_is_refused_before_the_meta_build(capsys, tmp_path, monkeypatch):
    import mcap.models.build as build
    monkeypatch.setattr(build, "_construct", lambda *a, **k: pytest.fail("built the model"))
    code, err = _quick(capsys, "measure", "--model",
                       "gpt:layers=100000000,hidden=8,heads=1,vocab=64,seq=8", "--balance",
                       "50000000,50000002", "--store", tmp_path / "s.sqlite")
    assert code == 2 and "100,000,002 layers" in err and "1,024" in err


def test_a_huge_sample_is_refused_before_drawing(capsys, tmp_path, monkeypatch):
    import mcap.core.partition as partition
    monkeypatch.setattr(partition, "random_partitionings",
                        lambda *a, **k: pytest.fail("drew samples"))
    code, err = _quick(capsys, "sweep", "--model", "gpt:layers=200,hidden=8,heads=1,vocab=8,seq=4",
                       "--stages", "8", "--sample", "999999999999", "--store",
                       tmp_path / "s.sqlite", "--out", tmp_path / "w.json")
    assert code == 2 and "--sample 999,999,999,999" in err and "1,000,000" in err


@pytest.mark.parametrize("argv,needle", [
    (["recommend", "--profile", PROFILE, "--stages", "4", "--method", "bo", "--iterations",
      "999999999"], "--iterations 999,999,999 is above the limit of 500"),
    (["evaluate", "--profile", PROFILE, "--sweep", DATA / "vgg11-cpu4-sample300.sweep.json",
      "--bo-iterations", "999999999"], "--bo-iterations 999,999,999 is above the limit"),
    (["recommend", "--profile", PRESS_PROFILE, "--stages", "4", "--press", "--capacity",
      "300MiB", "--press-candidates", "999999999"], "--press-candidates 999,999,999 is above"),
    (["scale", "--model", "gpt:layers=2,hidden=64,heads=1", "--vary", "hidden", "--low", "64",
      "--high", "1000000000000", "--step", "1", "--stages", "2", "--capacity", "1GiB"],
     "a grid of 999,999,999,937 values, above the limit of 100,000"),
    (["measure", "--model", TINY, "--balance", "2,2", "--threads", "100000"],
     "--threads 100,000 is more than the"),
])
def test_work_sizes_are_refused_naming_the_flag(capsys, tmp_path, argv, needle):
    code, err = _quick(capsys, *argv, "--store", tmp_path / "s.sqlite") if argv[0] in (
        "scale", "measure") else _quick(capsys, *argv)
    assert code == 2 and needle in err, err


def test_a_file_above_the_cap_is_refused_before_it_is_read(capsys, tmp_path):
    import tracemalloc
    for size in (2**30, 3 * 2**30):  # sparse: no disk is used
        big = tmp_path / f"big{size}.profile.json"
        with open(big, "wb") as fh:
            fh.truncate(size)
        tracemalloc.start()
        with pytest.raises(SchemaError, match="above the limit of 268,435,456 bytes") as caught:
            jsonio.load_profile(big)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < 2**20 and f"{size:,} bytes" in str(caught.value)  # nothing was read
        code, err = _quick(capsys, "predict", "--profile", big, "--balance", "3,3,5,19")
        assert code == 2 and "256 MiB" in err


def test_a_fifo_named_as_a_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "x.profile.json"
    os.mkfifo(fifo)
    with pytest.raises(SchemaError, match="FIFO"), no_hang():
        jsonio.load_profile(fifo)


def test_the_dashboard_lists_the_data_folder_without_opening_every_file(tmp_path, monkeypatch):
    """A fresh visit opens only what it shows: a 1 GiB file in the data folder is listed,
    not read (the Memory savers page looks for press statistics by the key, in chunks)."""
    from mcap.io import datasets
    big = tmp_path / "big.profile.json"
    with open(big, "wb") as fh:
        fh.truncate(2**30)
    assert not datasets.may_hold_key(big, "press")
    assert datasets.may_hold_key(PRESS_PROFILE, "press")
    assert not datasets.may_hold_key(PROFILE, "press")


def test_an_overflowing_batch_line_is_refused(capsys, tmp_path):
    from tests.workflow.capture.test_batches import _capture
    path = tmp_path / "cap.profile.json"
    jsonio.save(_capture(), path)
    code, out, err = cli(capsys, "predict", "--profile", path, "--balance", "2,3",
                         "--batch-size", "999999999999999998")
    assert code == 2 and "at batch size 999,999,999,999,999,998" in err and "PiB" not in out
    code, out, _ = cli(capsys, "predict", "--profile", path, "--balance", "2,3", "--batch-size",
                       "2147483648", "--json")
    assert code == 0 and json.loads(out)["predicted_peak"] > 0  # big, exact, positive


# --- the small things a user sees ----------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["plan", "--layers", "30", "--stages", "4"],
    ["press", "--profile", str(PRESS_PROFILE), "--balance", "8,8,7,7", "--capacity", "400MiB",
     "--json"],
])
def test_a_reader_that_stops_early_gets_no_traceback(argv):
    """``| head -n 1``: the reader is gone before mcap writes; mcap stops quietly."""
    read, write = os.pipe()
    os.close(read)  # head has read what it wanted and left
    proc = subprocess.run([sys.executable, "-m", "mcap", *argv], stdout=write,
                          stderr=subprocess.PIPE, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(REPO)))
    os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


def test_a_duplicate_spec_key_is_refused(capsys):
    from mcap.models.spec import parse_spec
    with pytest.raises(McapError, match="gives image_size twice"):
        parse_spec("vgg11:image_size=32,image_size=64")
    code, _, err = cli(capsys, "measure", "--model", "vgg11:image_size=32,image_size=64",
                       "--balance", "3,3,5,19")
    assert code == 2 and "image_size=32 and image_size=64" in err


def test_a_long_spec_is_cut_and_its_length_named(capsys):
    spec = "gpt:layers=2," + "x" * 97_000 + "=1"
    code, _, err = cli(capsys, "measure", "--model", spec, "--balance", "2,2")
    assert code == 2 and len(err) < 1000 and "97,015 characters" in err


def test_nodes_without_an_endpoint(capsys):
    from mcap.cli.main import build_parser
    from mcap.cli.options import check_node_options
    args = build_parser().parse_args(["measure", "--model", TINY, "--balance", "2,2",
                                      "--nnodes", "1"])
    check_node_options(args)
    host, port = args.rdzv_endpoint.rsplit(":", 1)
    assert host == "127.0.0.1" and 0 < int(port) < 65536  # one node: this machine
    code, _, err = cli(capsys, "measure", "--model", TINY, "--balance", "2,2", "--nnodes", "2")
    assert code == 2 and "--nnodes 2 needs --rdzv-endpoint HOST:PORT" in err
    assert "None" not in err


def test_ctrl_c_names_the_store_only_where_runs_are_kept(capsys, monkeypatch):
    import mcap.core.recommend as rec

    def interrupted(*a, **k):
        raise KeyboardInterrupt
    monkeypatch.setattr(rec, "recommend", interrupted)
    code = main(["recommend", "--profile", str(PROFILE), "--stages", "4"])
    err = capsys.readouterr().err
    assert code == 130 and err.strip() == "mcap: interrupted"


# --- the dashboard: names relative to the data folder and the store; query values ----------

def _app(monkeypatch, data: Path, store: Path, page: str = "", **params):
    from streamlit.testing.v1 import AppTest
    monkeypatch.setenv("MCAP_DATA_DIR", str(data))
    monkeypatch.setenv("MCAP_STORE", str(store))
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    for k, v in params.items():
        at.query_params[k] = v
    at.run()
    if page:
        at.switch_page(f"pages/{page}.py")
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_dashboard_errors_name_files_relative_to_the_data_folder(tmp_path, monkeypatch):
    data = tmp_path / "server" / "datasets"
    data.mkdir(parents=True)
    (data / "broken.profile.json").write_text('{"schema": "mcap.profile/1", "model": 3}')
    at = _app(monkeypatch, data, tmp_path / "server" / "store.sqlite",
              profile="bundled:broken.profile.json")
    shown = " ".join(e.value for e in at.error)
    assert "broken.profile.json: model: expected an object" in shown
    assert str(tmp_path) not in shown


def test_dashboard_store_errors_name_the_store_not_the_server_path(tmp_path, monkeypatch):
    store = tmp_path / "server" / "store.sqlite"
    store.parent.mkdir()
    store.write_text("not a database, some notes")
    at = _app(monkeypatch, DATA, store, "profile")
    shown = " ".join(e.value for e in at.error)
    assert "store.sqlite is not an mcap store" in shown and str(store.parent) not in shown


def test_a_bad_query_value_is_said_once(tmp_path, monkeypatch):
    at = _app(monkeypatch, DATA, tmp_path / "s.sqlite", "recommend", stages="-1")
    said = [w.value for w in at.warning if "stages='-1'" in w.value]
    assert len(said) == 1 and "not usable" in said[0] and "showing 1" in said[0]
    at.run()
    assert not [w.value for w in at.warning if "stages='-1'" in w.value]  # once
    at = _app(monkeypatch, DATA, tmp_path / "s.sqlite", "recommend", method="nonsense")
    assert any("method='nonsense'" in w.value for w in at.warning)
