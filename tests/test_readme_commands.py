"""README.md and the manual in docs/ stay true (issue 26, "Docs that stay true"; issue 40
item 15 moved the manual from the README to docs/, one page per topic).

Every command block (```bash) of README.md and of every docs/*.md page is read here, command
by command, and checked against the code. The pages are read in one order, the README first
and then the pages in the order docs/index.md lists them (``doc_files``); a variable (``M=``)
holds until the end of its page; command blocks are numbered across pages.

- statically (fast, no marker): each line is a known kind (``bash bin/...``, ``python -m
  mcap ...``, ``python bench/...``, ``source``, a variable); every flag shown in a ``[...]``
  group of a command or its comment exists on that command, with the choices listed; every
  model spec parses and every balance or plan sums to its layer count; every output goes to
  ``out/`` or ``.mcap/`` (never ``data/`` or the repository root); no command appears twice
  (each runs once), and a file under ``out/`` that a command reads is written by an earlier
  one. The prose is checked too: every ``mcap.x.y`` name and every repository path it names
  exists, its Python blocks' imports import, its store schema version, default predictor,
  page order and shareable-link keys are the code's; the README stays at most 150 lines and
  every page of docs/ is listed in docs/index.md;
- by running them (``integration``): every ``python -m mcap`` and ``python bench`` line, in
  page order, in a scratch folder (cwd a tmp dir with ``data`` and ``bench`` linked in,
  ``MCAP_STORE`` inside it), must exit 0, or the code its comment starts with ("exits 2").
  Lines that train a model are shrunk to a 6-layer GPT (``TINY``): balances rescaled to it,
  ``--sample`` 2, ``scale`` on one grid value with mcap's partitioner only, everything else
  (every flag, schedule, batch size, store and output path) as written; the two-node lines
  run both nodes on localhost, node 1 in a folder of its own. A line that reads only bundled
  files runs unchanged (torchgpipe times the model in the first ``evaluate`` only; later ones
  get the ``--no-time`` they show), and every decimal figure and balance its comment quotes
  must appear in what it prints. Afterwards the scratch folder holds nothing but ``out/``
  and ``.mcap/`` (and what the test linked in), and ``data/`` and the repository root are
  as they were. Two blocks run at a time; the 35 commands of the README alone took 127 s
  (load 2.6-3.5) to 165 s (load 3.5-4) on the 2-core VM with another suite running, most of
  it the stage processes' start-up (about 7 CPU seconds per training line); the 39 of the
  README and docs/ (four more, on bundled data only) took 243 s at load 5-8.

Placeholders filled: ``$M`` (the page's own variable), ``R`` (node rank 0 / 1) and
``HOST:PORT`` (127.0.0.1 and a free port). Not run: ``bash bin/dashboard`` and ``bash
bin/test`` (the suite and tests/test_e2e_browser.py cover them) and ``source``.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
DOCS = REPO / "docs"
INDEX = DOCS / "index.md"
README_MAX_LINES = 150  # issue 40 item 15: what a newcomer reads; the manual is in docs/
# What every model-training line runs on instead of its model: 6 layers (embedding, 4
# blocks, head), a few KiB per stage, so a line costs its processes' start-up only.
TINY = "gpt:layers=4,hidden=16,heads=2,vocab=32,seq=4"
TINY_LAYERS = 6
TRAINS = {"profile", "sweep", "measure", "scale"}  # mcap commands that build and run models
ALLOWED_OUTPUT_ROOTS = ("out/", ".mcap/")


@dataclass
class Command:
    lineno: int          # line of its page the command starts on
    text: str            # the command, continuation lines joined, comments removed
    comment: str = ""    # every comment of the command (same line and the lines under it)
    first_comment: str = ""  # the comment on its last line, where "exits N" is said
    env: dict = field(default_factory=dict)  # the page's variables set before it (M=...)
    block: int = 0       # which ```bash block (0, 1, ...), counted across pages
    page: str = "README.md"  # the page it is on, relative to the repository root

    @property
    def where(self) -> str:
        return f"{self.page}:{self.lineno}"


def _expand(text: str, env: dict) -> str:
    return re.sub(r"\$(\w+)", lambda m: env.get(m.group(1), m.group(0)), text)


def _split_comment(line: str) -> tuple[str, str]:
    """``code  # comment`` -> (code, comment); a '#' inside a word is not a comment."""
    m = re.search(r"(^|\s)#", line)
    if not m:
        return line, ""
    return line[:m.start()], line[m.end():].strip()


def doc_files() -> list[Path]:
    """The pages whose commands are checked, in the order they are read: README.md, then
    docs/*.md in the order docs/index.md links them, then any page it does not list
    (test_every_docs_page_is_in_the_index fails on those)."""
    listed = [DOCS / name for name in re.findall(r"\]\(([\w-]+\.md)\)", INDEX.read_text())]
    pages = [INDEX, *dict.fromkeys(p for p in listed if p.is_file())]
    pages += sorted(p for p in DOCS.glob("*.md") if p not in pages)
    return [README, *pages]


def readme_commands(text: str | None = None, page: str = "README.md",
                    first_block: int = 0) -> list[Command]:
    """The commands of one page's ```bash blocks (README.md's by default), in order."""
    text = (REPO / page).read_text() if text is None else text
    out: list[Command] = []
    env: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    block = first_block - 1
    while i < len(lines):
        if lines[i].strip() != "```bash":
            i += 1
            continue
        i += 1
        block += 1
        current: Command | None = None
        continued = False
        while i < len(lines) and lines[i].strip() != "```":
            raw = lines[i]
            code, comment = _split_comment(raw)
            if continued and current is not None:
                current.text += " " + code.strip().rstrip("\\").strip()
                if comment:
                    current.comment += " " + comment
                    current.first_comment = comment
                continued = code.rstrip().endswith("\\")
            elif not code.strip():
                # an indented comment line belongs to the command above it; a comment at
                # the start of a line speaks of the lines below
                if raw[:1].isspace() and current is not None and comment:
                    current.comment += " " + comment
                else:
                    current = None
            else:
                current = Command(i + 1, code.strip().rstrip("\\").strip(), comment, comment,
                                  dict(env), block, page)
                continued = code.rstrip().endswith("\\")
                m = re.fullmatch(r"([A-Z_]+)=(\S+)", current.text)
                if m:
                    env[m.group(1)] = m.group(2)
                out.append(current)
            i += 1
        i += 1
    return out


def doc_commands() -> list[Command]:
    """Every page's commands, pages in ``doc_files`` order, blocks numbered across pages."""
    out: list[Command] = []
    for path in doc_files():
        first = max((c.block for c in out), default=-1) + 1
        out += readme_commands(path.read_text(), str(path.relative_to(REPO)), first)
    return out


def argv_of(cmd: Command) -> list[str]:
    """The command's words with ``$VAR`` filled and ``[...]`` (optional) groups left out."""
    text = _expand(cmd.text, cmd.env)
    text = re.sub(r"\s*\[[^\[\]]*\]", "", text)
    return shlex.split(text)


def bracket_groups(cmd: Command) -> list[str]:
    """Every ``[...]`` group of the command and its comments (a group may span lines)."""
    joined = _expand(cmd.text, cmd.env) + " " + cmd.comment
    return re.findall(r"\[([^\[\]]*)\]", joined)


def kind_of(cmd: Command) -> str:
    words = cmd.text.split()
    if re.fullmatch(r"[A-Z_]+=\S+", cmd.text):
        return "variable"
    if words[:1] == ["source"]:
        return "source"
    if words[:1] == ["bash"] and len(words) >= 2 and words[1].startswith("bin/"):
        return "bin"
    if words[:3] == ["python", "-m", "mcap"]:
        return "mcap"
    if words[:1] == ["python"] and len(words) >= 2 and words[1].startswith("bench/"):
        return "bench"
    return "unknown"


# --- the parser's view of a command ------------------------------------------------------

def subparser(name: str) -> argparse.ArgumentParser:
    from mcap.cli.main import build_parser
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


def check_flags(cmd: Command) -> list[str]:
    """Problems with the flags the command's ``[...]`` groups show: a flag the command
    does not have, an alternative ``a|b`` that is not one of its choices."""
    problems = []
    args = argv_of(cmd)
    if kind_of(cmd) == "mcap":
        options = subparser(args[3])._option_string_actions
        known = lambda flag: options.get(flag)  # noqa: E731
    elif kind_of(cmd) == "bench":
        helptext = subprocess.run([sys.executable, str(REPO / args[1]), "--help"],
                                  capture_output=True, text=True, timeout=60).stdout
        known = lambda flag: flag if re.search(re.escape(flag) + r"\b", helptext) else None  # noqa: E731
    else:
        return problems
    for group in bracket_groups(cmd):
        words = group.replace(";", " ").replace(",", " , ").split()
        for k, word in enumerate(words):
            flag = word.rstrip(":.)")
            if not re.fullmatch(r"--[a-z][a-z0-9-]*", flag):
                continue
            action = known(flag)
            if action is None:
                problems.append(f"{cmd.where}: {flag} is not an option of {' '.join(args[:4])}")
                continue
            value = words[k + 1] if k + 1 < len(words) else ""
            choices = getattr(action, "choices", None)
            if "|" in value and choices:
                for alt in value.split("|"):
                    if alt not in choices:
                        problems.append(f"{cmd.where}: {flag} {alt}: not one of {sorted(choices)}")
    return problems


def option(args: list[str], name: str):
    for k, word in enumerate(args):
        if word == name and k + 1 < len(args):
            return args[k + 1]
        if word.startswith(name + "="):
            return word.split("=", 1)[1]
    return None


def layers_of(spec: str) -> int:
    """From the spec alone for the built-in models; a Hugging Face one (its layer count
    comes from its configuration) from its build on the meta device (no memory)."""
    from mcap.models.spec import layer_count, parse_spec
    name, params = parse_spec(spec)
    count = layer_count(name, params)
    if count is None and name.startswith("hf:"):
        from mcap.models import build_model
        count = build_model(spec, device="meta").info.num_layers
    return count


# --- static checks (fast) ----------------------------------------------------------------

def test_every_command_line_is_one_we_know():
    cmds = doc_commands()
    assert len(cmds) >= 30
    unknown = [f"{c.where}: {c.text}" for c in cmds if kind_of(c) == "unknown"]
    assert not unknown, unknown
    for c in cmds:
        if kind_of(c) == "bin":
            assert (REPO / c.text.split()[1]).is_file(), c.text
        if kind_of(c) == "bench":
            assert (REPO / c.text.split()[1]).is_file(), c.text
        if kind_of(c) == "mcap":
            subparser(argv_of(c)[3])  # a command mcap has
    # The first two commands are the README's promise to a newcomer: kept as they are, and
    # the second is what CI runs (.ci/run calls bin/test).
    assert [c.text for c in cmds[:2]] == ["bash bin/dashboard", "bash bin/test"]
    assert cmds[0].page == cmds[1].page == "README.md"
    assert re.search(r"^exec bash bin/test\b", (REPO / ".ci" / "run").read_text(), re.M)


def test_every_optional_flag_shown_exists():
    problems = [p for c in doc_commands() if kind_of(c) in ("mcap", "bench")
                for p in check_flags(c)]
    assert not problems, problems


def test_models_balances_and_plans_agree():
    """Every spec the pages show parses, and a balance or plan given with it covers its
    layers."""
    from mcap.core.capture.plan import parse_plan
    checked = 0
    for c in doc_commands():
        if kind_of(c) != "mcap":
            continue
        args = argv_of(c)
        spec = option(args, "--model")
        if spec is None or "nosuch" in spec or "depth=" in spec:
            continue  # the two refusals docs/models.md shows on purpose
        layers = layers_of(spec)
        assert layers, (c.where, spec)
        balance = option(args, "--balance")
        if balance:
            assert sum(map(int, balance.split(","))) == layers, (c.where, spec, balance)
            checked += 1
        plan = option(args, "--plan")
        if plan:
            assert sum(parse_plan(plan).balance) == layers, (c.where, spec, plan)
            checked += 1
        vary = option(args, "--vary")
        if vary:
            from mcap.workflow.scaling import spec_with
            low = int(option(args, "--low"))
            assert layers_of(spec_with(spec, vary, low)) == layers, (c.where, spec, vary)
    assert checked >= 4


def test_outputs_go_under_out_or_the_store_folder():
    """README items 7 and 14: no command writes into data/ or the repository root."""
    bad = []
    for c in doc_commands():
        if kind_of(c) != "mcap":
            continue
        args = argv_of(c)
        for name in ("--out", "--store"):
            value = option(args, name)
            if value is not None and not value.startswith(ALLOWED_OUTPUT_ROOTS):
                bad.append(f"{c.where}: {name} {value}")
        for group in bracket_groups(c):
            for m in re.finditer(r"--(?:out|store)\s+(\S+)", group):
                if m.group(1) not in ("PATH",) and not m.group(1).startswith(ALLOWED_OUTPUT_ROOTS):
                    bad.append(f"{c.where}: [{group}]")
    assert not bad, bad
    ignored = (REPO / ".gitignore").read_text().split()
    assert "/out/" in ignored and "/.mcap/" in ignored


def test_no_command_is_run_twice():
    """Issue 40 item 15: the manual moved to docs/ and the run stays as long as it was; a
    command two pages show would run twice (give one of them another flag, or name it in
    prose instead)."""
    cmds = doc_commands()
    where = {}
    twice = []
    for k, (words, _) in runnable(cmds).items():
        key = " ".join(words)
        if key in where:
            twice.append(f"{cmds[k].where} runs what {where[key]} runs: {key}")
        where.setdefault(key, cmds[k].where)
    assert not twice, twice


def test_every_file_a_command_reads_under_out_is_written_before():
    """Pages run in doc_files order: a command reading ``out/X`` needs an earlier command
    (on its page or an earlier one) that writes it."""
    written: set[str] = set()
    unwritten = []
    for c in doc_commands():
        if kind_of(c) != "mcap":
            continue
        args = argv_of(c)
        out = option(args, "--out")
        for a in args:
            if a.startswith("out/") and a != out and a not in written:
                unwritten.append(f"{c.where} reads {a}, which no earlier command writes")
        if out is not None:
            written.add(out)
    assert not unwritten, unwritten


def test_readme_is_short_and_every_page_is_in_the_index():
    """Issue 40 item 15: the README answers a newcomer in at most 150 lines (what this is,
    the two commands, a first session, two screenshots, where to read on); the manual is
    in docs/, and docs/index.md lists every page of it."""
    lines = README.read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)
    text = README.read_text()
    assert "![" in text and text.count("](docs/") >= 5
    listed = set(re.findall(r"\]\(([\w-]+\.md)\)", INDEX.read_text()))
    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    assert pages - listed == set(), f"docs/index.md does not list {sorted(pages - listed)}"
    for name in ("dashboard", "profiling", "prediction", "capture", "mpress", "models", "store",
                 "safety", "concepts"):
        assert name + ".md" in pages, name


def _page(name: str) -> str:
    return (DOCS / name).read_text()


def _prose() -> str:
    """README.md and every docs page, one after the other (each page's code fences are
    balanced, so a fence never pairs across pages)."""
    return "\n".join(p.read_text() for p in doc_files())


def test_named_modules_and_attributes_exist():
    """Every ``mcap.x.y`` the pages name imports or is an attribute (item 4:
    ``make_predictor`` and ``search(...)`` did not exist)."""
    missing = []
    names = set()
    prose = re.sub(r"```.*?```", "", _prose(), flags=re.S)  # the blocks are checked apart
    for span in re.findall(r"`([^`]+)`", prose):
        m = re.match(r"(mcap(?:\.[A-Za-z_]\w*)+)(?!\w|/\d)", span)
        if m and not re.match(r"mcap\.[a-z]+/\d", span):
            names.add(m.group(1))
    assert len(names) >= 20
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            try:
                for attr in parts[cut:]:
                    obj = getattr(obj, attr)
            except AttributeError:
                missing.append(name)
            break
        else:
            missing.append(name)
    assert not missing, missing


def test_named_paths_exist():
    """Every repository path the pages (and requirements.txt's comments) name exists
    (item 12: ``mcap/memtrack.py`` had moved to ``mcap/runner/``)."""
    text = _prose() + "\n" + (REPO / "requirements.txt").read_text()
    paths = set(re.findall(r"(?<![\w/.$-])((?:mcap|bench|tests|pages|bin|data|docs)/[\w./-]*[\w/])", text))
    assert len(paths) >= 30
    missing = sorted(p for p in paths if not (REPO / p).exists())
    assert not missing, missing


def test_commands_named_in_the_prose_exist():
    """A ``python -m mcap ...`` named in a sentence is a command with those options; a
    ``python bench/...`` one is a file."""
    prose = re.sub(r"```.*?```", "", _prose(), flags=re.S)
    spans = [s for s in re.findall(r"`([^`]+)`", prose) if "python " in s]
    assert len(spans) >= 5
    for span in spans:
        words = span.split()
        if words[1:3] == ["-m", "mcap"]:
            options = subparser(words[3])._option_string_actions
            assert all(w in options for w in words if w.startswith("--")), span
        else:
            script = next(w for w in words if w.startswith("bench/"))
            assert (REPO / script).is_file(), span


def test_python_blocks_import():
    """The imports of every ```python block run (names moved or renamed fail here)."""
    blocks = re.findall(r"```python\n(.*?)```", _prose(), re.S)
    assert len(blocks) >= 3
    for block in blocks:
        for line in block.splitlines():
            code = line.split("#", 1)[0].rstrip()
            if re.match(r"(from \S+ import |import )", code):
                tree = ast.parse(code)
                exec(compile(tree, "docs", "exec"), {})


def test_facts_the_pages_state_are_the_codes():
    from mcap.core import predictors
    from mcap.store import SCHEMA_VERSION
    from pages._shared import PAGES, SHARED_KEYS

    text = _prose()
    # item 1: the store's schema version (docs/store.md)
    store = _page("store.md")
    assert f"`PRAGMA user_version` {SCHEMA_VERSION}." in store
    assert re.search(r"older version \(1 to %d\)" % (SCHEMA_VERSION - 1), store)
    # item 2: one default predictor, named as such (docs/prediction.md), and no other
    # called the default on any page
    assert f"**`{predictors.DEFAULT}` (the default)**" in _page("prediction.md")
    for name in predictors.names():
        if name != predictors.DEFAULT:
            assert f"`{name}` (default)" not in text and f"`{name}` (the default)" not in text
    # item 10: docs/dashboard.md lists the pages in the sidebar's order
    dashboard = _page("dashboard.md")
    titles = [title for _, title, _, _ in PAGES]
    section = dashboard[dashboard.index("## Pages"):dashboard.index("## Working with it")]
    shown = [t for t in re.findall(r"^- \*\*([^*]+)\*\*", section, re.M)]
    assert shown == titles, shown
    words = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
             "fourteen fifteen sixteen").split()
    assert f"{words[len(titles)].capitalize()} pages" in section  # the count the page states
    # item 11: the shareable-link keys are SHARED_KEYS, all of them
    bullet = dashboard[dashboard.index("**Shareable links.**"):dashboard.index("live in the URL")]
    assert set(re.findall(r"`(\w+)`", bullet)) == set(SHARED_KEYS)


# --- running them (integration) ----------------------------------------------------------

def shrink_balance(balance: list[int], layers: int) -> list[int]:
    """The same number of stages over ``layers``, each at least 1, the rest shared out in
    proportion to the page's balance (largest remainders first)."""
    stages, total = len(balance), sum(balance)
    out = [1] * stages
    spare = layers - stages
    shares = [b / total * spare for b in balance]
    base = [int(s) for s in shares]
    out = [o + b for o, b in zip(out, base)]
    for k in sorted(range(stages), key=lambda k: base[k] - shares[k])[:layers - sum(out)]:
        out[k] += 1
    return out


def _set(args: list[str], name: str, value: str) -> None:
    k = args.index(name)
    args[k + 1] = value


def shrink(args: list[str]) -> list[str]:
    """A model-training mcap line on TINY, with balances, samples and grids cut to it."""
    args = list(args)
    if args[3] not in TRAINS or "--model" not in args:
        return args
    spec = option(args, "--model")
    _set(args, "--model", TINY)
    balance = option(args, "--balance")
    if balance and sum(map(int, balance.split(","))) != TINY_LAYERS:
        _set(args, "--balance", ",".join(map(str, shrink_balance(
            [int(b) for b in balance.split(",")], TINY_LAYERS))))
    if "--sample" in args:
        _set(args, "--sample", "2")
    if args[3] == "scale":  # one grid value of the tiny model's width
        assert layers_of(spec) > 0
        _set(args, "--vary", "hidden")
        _set(args, "--low", "16")
        _set(args, "--high", "16")
        if "--partitioner" not in args:  # mcap's own (profile + pick), not all four
            args += ["--partitioner", "mcap"]
    return args


def shrink_predict(args: list[str]) -> list[str]:
    """A predict/recommend/press line reading a profile a shrunk line made: its balance on
    TINY too."""
    args = list(args)
    profile = option(args, "--profile") or ""
    balance = option(args, "--balance")
    if profile.startswith("out/") and balance and sum(map(int, balance.split(","))) != TINY_LAYERS:
        _set(args, "--balance", ",".join(map(str, shrink_balance(
            [int(b) for b in balance.split(",")], TINY_LAYERS))))
    return args


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(root: Path) -> dict:
    """Every entry of data/ and of the repository root (top level), files with their size
    and mtime (a folder's own mtime moves when Python writes a __pycache__ into it)."""
    out = {}
    for path in [*root.iterdir(), *(root / "data").rglob("*")]:
        if path.name in (".pytest_cache", "__pycache__", ".hypothesis", ".git", "artifacts",
                         ".venv", ".mcap", "out"):
            continue
        st = path.lstat()
        out[str(path.relative_to(root))] = None if path.is_dir() else (st.st_size, st.st_mtime_ns)
    return out


def figures(comment: str) -> list[str]:
    """Decimal figures (0.10%, 1.000x, 0.614) and balances (16-1-5-8, 16,2,8,4) a comment
    quotes."""
    found = re.findall(r"(?<![\w.])\d+\.\d+%?", comment)
    found += re.findall(r"(?<![\w,-])\d+(?:[-,]\d+){3,}(?![\w])", comment)
    return found


def test_quoted_figures_are_found_in_output():
    quoted = figures("the bundled pair: workspace p90 0.08%, exact's pick 16-1-5-8 1.000x; "
                     "here 16,2,8,4 (paper 4.3), 27 runs, all 3,654")
    assert quoted == ["0.08%", "1.000", "4.3", "16-1-5-8", "16,2,8,4"]
    assert _appears("16-1-5-8", "exact    16-1-5-8    73.40 MiB") and \
        _appears("16,2,8,4", "balance 16-2-8-4") and not _appears("16-1-5-8", "116-1-5-80")
    assert not _appears("0.08%", "p90 0.09%")


def _appears(figure: str, output: str) -> bool:
    if re.fullmatch(r"\d+(?:[-,]\d+)+", figure):
        return bool(re.search(r"(?<!\d)" + r"[-,]".join(re.split(r"[-,]", figure)) + r"(?!\d)", output))
    return figure in output


def dependencies(cmds: list[Command]) -> dict[int, set[int]]:
    """For each command (by index), the commands that must finish before it: the one
    before it in its block (a block is a session, read top to bottom), the one that
    wrote a file under out/ it reads, and, for a command writing a file, every earlier
    one that wrote or read that file (two pages write out/vgg11.profile.json)."""
    writer: dict[str, int] = {}
    users: dict[str, set[int]] = {}  # every earlier command that wrote or read the file
    deps: dict[int, set[int]] = {}
    last_in_block: dict[int, int] = {}
    for k, c in enumerate(cmds):
        if kind_of(c) not in ("mcap", "bench"):
            continue
        args = argv_of(c)
        out = option(args, "--out")
        deps[k] = {last_in_block[c.block]} if c.block in last_in_block else set()
        deps[k] |= {writer[a] for a in args if a in writer and a != out}
        for a in args:
            if a in writer and a != out:
                users[a].add(k)
        if out is not None:
            deps[k] |= users.get(out, set())
            writer[out] = k
            users.setdefault(out, set()).add(k)
        last_in_block[c.block] = k
    return deps


def runnable(cmds: list[Command]) -> dict[int, tuple[list[str], bool]]:
    """For each command to run (by index): the words the test runs and whether they differ
    from the page's (shrunk). Training lines are shrunk; torchgpipe times a model in the
    first ``evaluate`` line only, later evaluations (which quote no timed figure) take the
    ``--no-time`` they show."""
    out = {}
    timed = False
    for k, c in enumerate(cmds):
        kind = kind_of(c)
        if kind not in ("mcap", "bench"):
            continue
        args = argv_of(c)
        shrunk = kind == "mcap" and (args[3] in TRAINS and "--model" in args
                                     or (option(args, "--profile") or "").startswith("out/"))
        if kind == "mcap":
            args = shrink_predict(shrink(args))
        evaluates = args[1:4] == ["-m", "mcap", "evaluate"] or args[1] == "bench/bench_evaluate.py"
        if evaluates and timed and "--no-time" not in args:
            args.append("--no-time")
        timed |= evaluates
        out[k] = (args, shrunk)
    return out


def _run_one(cmd: Command, args: list[str], shrunk: bool, work: Path, node1: Path,
             env: dict) -> tuple[float, str]:
    """Run one command of a page (both nodes for a two-node line); '' or what went wrong."""
    m = re.match(r"exits (\d+)", cmd.first_comment)
    expected = int(m.group(1)) if m else 0
    started = time.monotonic()

    def start(a, cwd, extra=None):
        return subprocess.Popen([sys.executable, *a[1:]], cwd=cwd, env={**env, **(extra or {})},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    if "--node-rank" in args:  # node 1 in a folder (and store) of its own, node 0 here
        port = str(_free_port())
        procs = []
        for rank, cwd in ((1, node1), (0, work)):
            a = [w.replace("HOST:PORT", f"127.0.0.1:{port}") for w in args]
            _set(a, "--node-rank", str(rank))
            extra = {"MCAP_STORE": str(node1 / "store.sqlite")} if rank == 1 else None
            procs.append(start(a, cwd, extra))
    else:
        procs = [start(args, work)]
    results = []
    for p in procs:
        try:
            results.append((p, *p.communicate(timeout=300)))
        except subprocess.TimeoutExpired:
            p.kill()
            results.append((p, *p.communicate()))
    seconds = time.monotonic() - started
    shown = " ".join(args)
    for p, out, err in results:
        if p.returncode != expected:
            return seconds, (f"{cmd.where}: {shown}\nexit {p.returncode}, expected "
                             f"{expected}\n{err[-3000:]}")
    out = results[-1][1] + results[-1][2]
    if not shrunk and expected == 0:
        for figure in figures(cmd.comment):
            if not _appears(figure, out):
                return seconds, (f"{cmd.where} quotes {figure}, which {shown} does "
                                 f"not print:\n{out[-3000:]}")
    return seconds, ""


@pytest.mark.integration
def test_every_readme_command_runs(tmp_path):
    """README items 6, 7, 13 and 14 and "What to build" 6: every line of the README and of
    docs/ runs as written (shrunk where it trains), exits as it says, and writes only under
    out/ and .mcap/.
    Two lines run at a time (a line waits for the line above it in its block and for the
    line that wrote the file it reads): a line starts once those have finished, the first
    such line in page order first, so a slot never sits waiting on a line the other slot
    runs (it did: 410 s of which the same lines in ready order take 354 s)."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    work = tmp_path / "work"
    work.mkdir()
    (work / "data").symlink_to(REPO / "data")
    (work / "bench").symlink_to(REPO / "bench")
    node1 = tmp_path / "node1"  # the second machine of the two-node lines
    node1.mkdir()
    (node1 / "out").mkdir()
    env = {**os.environ, "MCAP_STORE": str(work / ".mcap" / "store.sqlite"),
           "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("MCAP_DATA_DIR", None)
    before = _snapshot(REPO)
    cmds = doc_commands()
    deps = dependencies(cmds)
    words = runnable(cmds)
    started = time.monotonic()
    results: dict[int, tuple[float, str]] = {}
    pending = list(deps)  # in page order
    running: dict = {}
    with ThreadPoolExecutor(max_workers=2) as pool:
        while pending or running:
            for k in list(pending):
                if len(running) == 2:
                    break
                if not deps[k] <= results.keys():
                    continue  # a line it waits for has not finished
                pending.remove(k)
                if any(results[d][1] for d in deps[k]):
                    results[k] = (0.0, f"{cmds[k].where}: not run, an earlier line failed")
                    continue
                running[pool.submit(_run_one, cmds[k], *words[k], work, node1, env)] = k
            if not running:
                continue  # lines marked not run may have readied others
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                results[running.pop(f)] = f.result()
    results = {k: results[k] for k in deps}  # page order for the report
    wall = time.monotonic() - started
    print("\n".join(f"{s:6.1f} s  {cmds[k].where}: {' '.join(words[k][0][1:4])}"
                    for k, (s, _) in results.items()))
    print(f"{len(results)} commands, {wall:.1f} s wall")
    failures = [why for _, why in results.values() if why]
    assert not failures, "\n\n".join(failures)
    made = sorted(p.name for p in work.iterdir())
    assert set(made) <= {"out", ".mcap", "data", "bench"}, made
    assert sorted(p.name for p in node1.iterdir() if not p.name.startswith("store.sqlite")) == ["out"]
    assert _snapshot(REPO) == before


def test_help_is_plain_words():
    """README item 17: ``--help`` showed RST backticks and ".;" where descriptions joined."""
    from mcap.cli.main import build_parser
    parser = build_parser()
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for name, p in [("", parser), *sub.choices.items()]:
        text = p.format_help()
        assert "`" not in text and ".;" not in text, (name, re.findall(r".{0,30}(?:`|\.;).{0,30}", text, re.S))
