"""The current-figures table at the top of BENCHMARKS.md (issue 27): what a benchmark
reports (``Figure``), a row of the table (``Row``), and rewriting only the part of the file
between the two markers.

A kept benchmark script exposes ``figures(quick: bool = False) -> list[Figure]`` and prints
them with ``--figures``; ``bench/run.py`` runs each in a process of its own, turns its
figures into rows (command, machine, date) and merges them into the table:

- a row this run produced replaces the row of the same figure;
- every other row stays as it was, with its own command, machine and date: rows of
  benchmarks not run this time (``--only``, full-mode-only figures under ``--quick``) and
  rows no script produces (the GPU figures recorded from ``bench/gpu_acceptance.py``);
- a benchmark that failed adds one row whose value says ``failed: <reason>``; its older rows
  stay (their date says when they were taken). Its failed row goes at its next success.

Rows are grouped by the script their command names, in ``bench/run.py``'s order; rows of any
other script come last, in the order the file had them. Pure: no process, no benchmark.
"""
from __future__ import annotations

import os
import platform
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional, Sequence

BEGIN = "<!-- current:begin -->"
END = "<!-- current:end -->"
COLUMNS = ("figure", "target", "value", "command", "machine", "date")
FAILED = "failed: "
NOTE = "<!-- Written by bench/run.py (bench/README.md); change rows through the benchmarks. -->"


@dataclass(frozen=True)
class Figure:
    """One figure a benchmark reports. ``timing``: a time, or computed from times measured
    now: it varies run to run, and its value says over how many runs (median of N)."""
    name: str
    value: str
    target: str = "none set"
    timing: bool = False


@dataclass(frozen=True)
class Row:
    figure: str
    target: str
    value: str
    command: str
    machine: str
    date: str

    @property
    def failed(self) -> bool:
        return self.value.startswith(FAILED)

    @property
    def script(self) -> Optional[str]:
        """The ``bench/...py`` its command names (None where it names none)."""
        m = re.search(r"bench/[\w/.-]+?\.py", self.command)
        return m.group(0) if m else None


class MarkerError(ValueError):
    """The file does not hold exactly one BEGIN marker followed by one END marker."""


def show(figures: Iterable[Figure], out=None) -> None:
    """Print figures as a small markdown table (what a script's ``--figures`` prints)."""
    out = out or sys.stdout
    print("| figure | target | value |", file=out)
    print("|---|---|---|", file=out)
    for f in figures:
        value = f.value + (" (timing: varies run to run)" if f.timing else "")
        print(f"| {_cell(f.name)} | {_cell(f.target)} | {_cell(value)} |", file=out)


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _cells(line: str) -> list[str]:
    inner = line.strip()[1:-1] if line.strip().endswith("|") else line.strip()[1:]
    parts = re.split(r"(?<!\\)\|", inner)
    return [p.strip().replace("\\|", "|") for p in parts]


def render(rows: Sequence[Row]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(_cell(getattr(r, c)) for c in COLUMNS) + " |")
    return "\n".join(lines)


def split(text: str) -> tuple[str, str, str]:
    """(before BEGIN, between the markers, from END on): MarkerError unless the text holds
    exactly one BEGIN line and, after it, exactly one END line."""
    lines = text.splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if line.strip() == BEGIN]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if len(begins) != 1 or len(ends) != 1:
        raise MarkerError(f"needs exactly one line {BEGIN} and one line {END}; found "
                          f"{len(begins)} and {len(ends)}")
    b, e = begins[0], ends[0]
    if e < b:
        raise MarkerError(f"{END} (line {e + 1}) comes before {BEGIN} (line {b + 1})")
    return "".join(lines[:b + 1]), "".join(lines[b + 1:e]), "".join(lines[e:])


def parse(section: str) -> list[Row]:
    """The rows of the table between the markers (the header, the rule and any other line
    left out). A row with the wrong number of cells is a MarkerError (the table was edited
    by hand into a shape this cannot keep)."""
    rows = []
    for n, line in enumerate(section.splitlines(), 1):
        s = line.strip()
        if not s.startswith("|") or re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", s):
            continue
        cells = _cells(s)
        if tuple(cells) == COLUMNS:
            continue
        if len(cells) != len(COLUMNS):
            raise MarkerError(f"line {n} of the current table has {len(cells)} cells, not "
                              f"{len(COLUMNS)}: {s[:80]}")
        rows.append(Row(*cells))
    return rows


def merge(old: Sequence[Row], new: Sequence[Row], ran: Iterable[str],
          order: Sequence[str]) -> list[Row]:
    """The table after a run (module docstring). ``ran``: the scripts (``bench/x.py``) of
    the benchmarks that ran, ok or not; ``order``: every benchmark's script, in table order."""
    ran = set(ran)
    produced = {r.figure for r in new}
    kept = [r for r in old if r.figure not in produced and not (r.failed and r.script in ran)]
    out = []
    for script in order:
        out += [r for r in new if r.script == script]
        out += [r for r in kept if r.script == script]
    known = set(order)
    out += [r for r in new if r.script not in known]
    out += [r for r in kept if r.script not in known]
    return out


def rewrite(text: str, rows: Sequence[Row]) -> str:
    """``text`` with only the part between the markers replaced by ``rows``' table."""
    head, _, tail = split(text)
    return f"{head}{NOTE}\n{render(rows)}\n{tail}"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename:
    a reader never sees half a file, and a failure leaves the old one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def machine() -> str:
    """This machine in a few words: cores, CPU model, OS, Python and torch versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        from importlib.metadata import version
        torch = f"torch {version('torch')}"
    except Exception:  # noqa: BLE001 (no torch: say so)
        torch = "no torch"
    return (f"{os.cpu_count()} cores {cpu}, {platform.system()} {platform.machine()}, "
            f"Python {platform.python_version()}, {torch}")
