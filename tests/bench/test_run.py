"""bench/run.py's rewriting of BENCHMARKS.md's current-figures table (issue 27): only the
part between the markers changes, the text below is kept byte for byte, a failed benchmark
adds a "failed:" row without wiping the others, and a file without its markers is refused
with a plain message and exit 2. No benchmark runs here and no process starts (run_one is
replaced); no measured figure is asserted."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = next(p for p in Path(__file__).resolve().parents if (p / "bench" / "run.py").is_file())
sys.path.insert(0, str(REPO / "bench"))
_spec = importlib.util.spec_from_file_location("bench_run", REPO / "bench" / "run.py")
run = sys.modules["bench_run"] = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(run)

from benchtable import (BEGIN, END, Figure, MarkerError, Row, merge, parse,  # noqa: E402
                        render, rewrite, split, write_atomic)

HEAD = "# Benchmarks\n\nIntro.\n\n"
LOG = "\n## Log\n\n## 2026-11-26: a dated section\n\n| a | b |\n|---|---|\n| 1 | 2 |\n"
GPU = Row("concurrent ipc vs alone (H200)", "<= 0.5%", "0.021%",
          "`python bench/gpu_acceptance.py OUT --budget 480` (recorded)", "1x H200", "2026-11-26")


def row(fig: str, script: str, value: str = "1", date: str = "2026-01-01") -> Row:
    return Row(fig, "t", value, f"`python bench/{script} --figures`", "m", date)


def doc(rows) -> str:
    return f"{HEAD}{BEGIN}\n{render(rows)}\n{END}\n{LOG}"


def test_markers_replaced_and_everything_else_kept_byte_for_byte():
    text = doc([row("x", "bench_search.py")])
    out = rewrite(text, [row("y | with a pipe", "bench_bo.py", "2")])
    head, section, tail = split(out)
    assert head == HEAD + BEGIN + "\n"
    assert tail == END + "\n" + LOG
    assert parse(section) == [row("y | with a pipe", "bench_bo.py", "2")]
    assert out.startswith(HEAD) and out.endswith(LOG)


def test_merge_replaces_produced_rows_keeps_the_rest_in_table_order():
    order = ["bench/bench_search.py", "bench/bench_bo.py"]
    old = [GPU, row("bo a", "bench_bo.py"), row("search a", "bench_search.py"),
           row("search full only", "bench_search.py")]
    new = [row("search a", "bench_search.py", "9", "2026-02-02")]
    got = merge(old, new, ["bench/bench_search.py"], order)
    assert got == [new[0], row("search full only", "bench_search.py"), row("bo a", "bench_bo.py"),
                   GPU]


def test_a_failed_benchmark_adds_its_row_and_wipes_nothing():
    order = ["bench/bench_search.py", "bench/bench_bo.py"]
    old = [row("search a", "bench_search.py"), row("bo a", "bench_bo.py"), GPU]
    failed = row("bo: every figure", "bench_bo.py", "failed: boom")
    got = merge(old, [row("search a", "bench_search.py", "3"), failed],
                ["bench/bench_search.py", "bench/bench_bo.py"], order)
    assert failed in got and row("bo a", "bench_bo.py") in got and GPU in got
    assert row("search a", "bench_search.py", "3") in got and len(got) == 4
    # the next run of bo that succeeds drops its failed row
    again = merge(got, [row("bo a", "bench_bo.py", "4")], ["bench/bench_bo.py"], order)
    assert not any(r.failed for r in again)
    assert row("bo a", "bench_bo.py", "4") in again and GPU in again


def test_run_main_writes_only_the_table(tmp_path, monkeypatch, capsys):
    """The whole of run.main with run_one replaced: one benchmark ok, one failing."""
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(doc([GPU, row("old search row", "bench_search.py")]))

    def fake(b, quick):
        if b.name == "bo":
            return [], "RuntimeError: boom", 0.1
        return [Figure(f"{b.name} figure", "42", "t"), Figure(f"{b.name} time", "1 s (median of 3)",
                                                              timing=True)], "", 0.1

    monkeypatch.setattr(run, "run_one", fake)
    code = run.main(["--quick", "--only", "search,bo", "--file", str(path)])
    assert code == 1  # a benchmark failed: the table is written all the same
    text = path.read_text()
    assert text.startswith(HEAD + BEGIN) and text.endswith(END + "\n" + LOG)
    rows = parse(split(text)[1])
    figs = {r.figure: r for r in rows}
    assert figs["bo: every figure"].value == "failed: RuntimeError: boom"
    assert "--quick" in figs["search figure"].command  # quick rows say so
    assert "load" in figs["search time"].value and "load" not in figs["search figure"].value
    assert GPU in rows and "old search row" in figs  # kept: recorded and not re-produced
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed
    before = text
    assert run.main(["--quick", "--only", "search", "--file", str(path), "--dry-run"]) == 0
    assert path.read_text() == before  # --dry-run writes nothing


@pytest.mark.parametrize("body", [
    "# no markers at all\n",
    f"{BEGIN}\n| a |\n",
    f"{END}\n{BEGIN}\n",
    f"{BEGIN}\n{END}\n{BEGIN}\n{END}\n",
    f"{BEGIN}\n| only | three | cells |\n{END}\n",
])
def test_bad_markers_exit_2_with_a_plain_message(tmp_path, monkeypatch, capsys, body):
    path = tmp_path / "BENCHMARKS.md"
    path.write_text(body)
    monkeypatch.setattr(run, "run_one", lambda *a: pytest.fail("nothing may run"))
    assert run.main(["--quick", "--file", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(path) in err and err.count("\n") == 1
    assert path.read_text() == body


def test_unknown_benchmark_and_missing_file_exit_2(tmp_path, capsys):
    assert run.main(["--only", "nope", "--file", str(tmp_path / "x.md")]) == 2
    assert "unknown benchmark" in capsys.readouterr().err
    assert run.main(["--file", str(tmp_path / "x.md")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_split_names_what_is_wrong():
    with pytest.raises(MarkerError, match="exactly one"):
        split("nothing here")
    with pytest.raises(MarkerError, match="before"):
        split(f"{END}\n{BEGIN}\n")


def test_write_atomic_replaces_the_file(tmp_path):
    path = tmp_path / "f.md"
    path.write_text("old")
    write_atomic(path, "new")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["f.md"]


def test_every_benchmark_is_a_kept_script_with_figures():
    """The registry names scripts that exist and define figures(quick) (read, not run)."""
    for b in run.BENCHES:
        source = (REPO / b.path).read_text()
        assert "def figures(quick: bool = False)" in source, b.path
        assert "--figures" in source, b.path


def test_the_real_table_parses_and_every_figure_has_its_method_paragraph():
    """BENCHMARKS.md as committed (issue 40 item 15): run.py can rewrite its table (one pair
    of markers, rows of six cells), the dated log is not in it (bench/log/, one file per
    session), and every script the table names has a paragraph under "How each figure is
    measured" that names it and links a session of the log."""
    import re
    text = (REPO / "BENCHMARKS.md").read_text()
    head, section, tail = split(text)
    rows = parse(section)
    assert len(rows) >= 40
    assert rewrite(text, rows) == text  # rewriting with the same rows changes nothing
    methods = tail[tail.index("## How each figure is measured"):]
    paragraphs = [p for p in methods.split("\n\n") if p.startswith("**")]
    scripts = {m for r in rows for m in re.findall(r"python bench/([\w.]+\.py)", r.command)}
    assert {b.path.split("/")[-1] for b in run.BENCHES} <= scripts
    for script in sorted(scripts):
        own = [p for p in paragraphs if f"(`{script}`)" in p]
        assert len(own) == 1, f"BENCHMARKS.md: {script} has {len(own)} method paragraphs"
        assert "](bench/log/" in own[0], f"BENCHMARKS.md: {script}'s paragraph links no session"
    assert "\n## 20" not in tail and (REPO / "bench" / "log" / "README.md").is_file()
