"""The layers of ARCHITECTURE.md hold: imports flow one way, the pure core touches neither
torch nor files, nothing in mcap/ imports streamlit, and the dashboard and the CLI compute
the same error statistics. Every import counts, also the ones inside functions."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# layer -> the mcap layers it may import (besides itself). Third-party rules below.
ALLOWED = {
    "core": set(),
    "files": {"core"},  # the files mcap writes and the paths it is given (issue 38)
    "models": {"core", "files"},
    "store": {"core", "files"},
    "io": {"core", "store", "files"},
    "figures": {"core"},
    "runner": {"core", "models", "files"},
    "workflow": {"core", "models", "runner", "store", "io", "files"},
    "app": {"core", "io", "store", "figures", "workflow", "models", "files"},  # models.spec is pure
    "cli": {"core", "models", "runner", "store", "io", "workflow", "app", "files"},
}
# third-party / stdlib modules a layer must never import
FORBIDDEN = {
    "core": {"torch", "streamlit", "sqlite3", "subprocess", "pathlib", "tempfile", "shutil",
             "pandas", "plotly"},
    "files": {"torch", "streamlit", "sqlite3", "subprocess", "pandas", "plotly"},
    "models": {"streamlit"},
    "store": {"torch", "streamlit"},
    "io": {"torch", "streamlit"},
    "figures": {"torch", "streamlit"},
    "runner": {"streamlit"},
    "workflow": {"streamlit"},
    "app": {"torch", "streamlit"},
    "cli": {"streamlit"},
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            if node.module == "mcap":
                out |= {f"mcap.{a.name}" for a in node.names}
    return out


def _layer(path: Path) -> str:
    rel = path.relative_to(ROOT / "mcap").parts
    return rel[0] if len(rel) > 1 else "top"


def _modules():
    return sorted(p for p in (ROOT / "mcap").rglob("*.py") if _layer(p) != "top")


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_flow_one_way(path):
    layer = _layer(path)
    bad = []
    for name in _imports(path):
        top = name.split(".")[0]
        if top == "mcap":
            other = name.split(".")[1] if "." in name else "top"
            if other not in {layer} | ALLOWED[layer] and other != "top":
                bad.append(f"{name} (layer {other})")
        elif top in FORBIDDEN[layer]:
            bad.append(name)
    assert not bad, f"{path.relative_to(ROOT)} ({layer}) imports {', '.join(sorted(bad))}"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the mcap modules it imports, every import counted (inside functions too):
    ``from mcap.a import b`` is an edge to ``mcap.a.b`` when that is a module, else to
    ``mcap.a``."""
    paths = {_module_name(p): p for p in (ROOT / "mcap").rglob("*.py")}

    def resolve(name: str):
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for module, path in paths.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges |= {resolve(a.name) for a in node.names if a.name.startswith("mcap")}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                    and node.module.startswith("mcap"):
                edges |= {f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in paths
                          else resolve(node.module) for a in node.names}
        graph[module] = edges - {None, module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles():
    """No two mcap modules import each other, directly or round a loop, not even inside a
    function: shared helpers live in their own modules (``mcap.cli.options``,
    ``mcap.cli.output``, ``mcap.runner.isolation``, ``mcap.workflow.measuring``)."""
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


# Where a registered name may be compared: the registries themselves.
REGISTRY_HOMES = ("mcap/core/search/", "mcap/core/predictors/", "mcap/runner/engines/",
                  "mcap/runner/executors/",
                  "mcap/core/press/base.py", "mcap/core/press/mpress.py",
                  "mcap/core/press/milp.py", "mcap/core/capture/meshsearch.py")


def registered_names() -> set[str]:
    """Every name in a registry: search methods, predictors, engines, mesh searches and
    MPress planners."""
    from mcap.core import predictors, search
    from mcap.core.capture import meshsearch
    from mcap.core.press import base as planners
    from mcap.runner import engines, executors
    return {*search.names(), *predictors.names(), *engines.names(), *meshsearch.names(),
            *planners.names(), *executors.names()}


def name_checks(path: Path, names: set[str]) -> list[str]:
    """Comparisons of a registered name written as a literal (``method == "bo"``,
    ``engine in ("pipelining", "hybrid")``): a capability belongs on the registered class."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        for side in (node.left, *node.comparators):
            values = side.elts if isinstance(side, (ast.Tuple, ast.List, ast.Set)) else [side]
            hits = [v.value for v in values if isinstance(v, ast.Constant) and v.value in names]
            if hits:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} compares {hits[0]!r}")
    return found


def test_no_name_checks_of_registered_names_outside_the_registries():
    names = registered_names()
    paths = [p for p in _modules() if not str(p.relative_to(ROOT)).startswith(REGISTRY_HOMES)]
    paths += sorted((ROOT / "pages").glob("*.py")) + [ROOT / "app.py"]
    found = [hit for p in paths for hit in name_checks(p, names)]
    assert not found, "capabilities belong on the registered class:\n" + "\n".join(found)


def test_pages_only_render():
    """pages/ import mcap and streamlit, never torch, and start no processes themselves."""
    for path in sorted((ROOT / "pages").glob("*.py")) + [ROOT / "app.py"]:
        names = _imports(path)
        assert not {n for n in names if n.split(".")[0] in ("torch", "subprocess", "sqlite3")}, path
        assert not {n for n in names if n.startswith(("mcap.runner", "mcap.workflow"))
                    and not n.startswith(("mcap.runner.engines", "mcap.runner.executors"))
                    }, path  # the registries only


def test_the_cli_and_unknown_models_need_no_torch():
    """`profile --model bogus` says "unknown model" without importing torch (checked in a
    fresh interpreter where importing torch fails)."""
    code = ("import sys\n"
            "class Block:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'torch' or name.startswith('torch.'):\n"
            "            raise ImportError('torch is blocked in this test')\n"
            "sys.meta_path.insert(0, Block())\n"
            "from mcap.cli.main import main\n"
            "sys.exit(main(['profile', '--model', 'bogus', '--stages', '2', '--out', 'x.json']))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=str(ROOT), env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2, done.stderr
    assert "unknown model 'bogus'" in done.stderr and "Traceback" not in done.stderr


def test_dashboard_and_evaluate_report_the_same_p90_on_every_bundled_pair():
    from mcap.app.searches import sweep_predictions
    from mcap.core.evaluate import evaluate
    from mcap.core.setup import mismatch
    from mcap.figures.space import error_stats
    from mcap.io import datasets

    refs = datasets.bundled()
    profiles = [datasets.load(r) for r in refs if r.kind == "profile"]
    sweeps = [datasets.load(r) for r in refs if r.kind == "sweep"]
    pairs = [(p, s) for p in profiles for s in sweeps if mismatch(p, s) is None]
    assert pairs, "no bundled profile matches a bundled sweep"
    for profile, sweep in pairs:
        cli = evaluate(profile, sweep).errors.p90
        page = error_stats(sweep.runs, sweep_predictions(profile, sweep)).p90
        assert cli == pytest.approx(page, abs=1e-12), (profile.model.spec, sweep.setup)


# --- units of one idea (issue 27) -------------------------------------------------------------

MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60
# A module over MAX_MODULE_LINES lines stays one only with its reason here ("mcap/x.py": why);
# an entry whose module is short again, or gone, fails (test_modules_are_short_or_say_why).
LONG_MODULES: dict[str, str] = {
    "mcap/core/fields.py": "one checked reader per field of every record (profile, sweep, "
                           "store row): the schema's checks in one place, so the file and "
                           "the store cannot disagree",
    "mcap/runner/zygote.py": "one process's protocol: its messages, the preload, the serve "
                             "loop, the forked child's start and the pool's handle on it "
                             "change together (over 400 lines since it answers action lists too, "
                             "issue 42 item 6)",
}
LONG_BECAUSE = "Long because:"  # a function over MAX_FUNCTION_LINES says why in its docstring


def _sized_paths() -> list[Path]:
    """Every module whose size is checked: mcap/, pages/ and app.py."""
    return sorted((ROOT / "mcap").rglob("*.py")) + sorted((ROOT / "pages").glob("*.py")) \
        + [ROOT / "app.py"]


def module_size_problems(lines: dict[str, int], listed: dict[str, str],
                         limit: int = MAX_MODULE_LINES) -> list[str]:
    """Modules over ``limit`` lines not listed with a reason, and listed ones that are not
    (short again, or gone): ``lines`` maps each module to its line count."""
    found = [f"{name}: {n} lines (> {limit}); split it along its seams or list it in "
             f"LONG_MODULES with its reason" for name, n in sorted(lines.items())
             if n > limit and not listed.get(name, "").strip()]
    found += [f"{name}: listed in LONG_MODULES but "
              + ("no longer exists" if name not in lines else f"has {lines[name]} lines")
              for name in sorted(listed) if lines.get(name, 0) <= limit]
    return found


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions and methods (nested ones too) over ``limit`` lines whose docstring does not
    say why (``Long because: ...``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > limit and LONG_BECAUSE not in (ast.get_docstring(node) or ""):
                found.append(f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}"
                             f":{node.lineno} {node.name}: {n} lines (> {limit})")
    return found


def test_modules_are_short_or_say_why():
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in _sized_paths()}
    found = module_size_problems(lines, LONG_MODULES)
    assert not found, "modules are one idea each:\n" + "\n".join(found)


def test_the_module_size_check_sees_an_offender_and_a_stale_entry():
    assert module_size_problems({"a.py": 401, "b.py": 400}, {}) == [
        "a.py: 401 lines (> 400); split it along its seams or list it in LONG_MODULES with "
        "its reason"]
    assert module_size_problems({"a.py": 401}, {"a.py": "one table"}) == []
    assert module_size_problems({"a.py": 401}, {"a.py": " "}) != []  # a reason, not a blank
    assert module_size_problems({"a.py": 120}, {"a.py": "one table", "gone.py": "x"}) == [
        "a.py: listed in LONG_MODULES but has 120 lines",
        "gone.py: listed in LONG_MODULES but no longer exists"]


def test_functions_are_short_or_say_why():
    found = [hit for p in _sized_paths() for hit in long_functions(p)]
    assert not found, (f"functions over {MAX_FUNCTION_LINES} lines: name their steps, or "
                       f"start the docstring with '{LONG_BECAUSE} ...':\n" + "\n".join(found))


def test_the_function_length_check_sees_an_offender(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(60))
    path = tmp_path / "m.py"
    path.write_text(f"def long():\n{body}\n\nclass C:\n    def short(self):\n        return 1\n")
    assert [hit.split(":", 1)[1] for hit in long_functions(path)] == ["1 long: 61 lines (> 60)"]
    path.write_text(f'def long():\n    """{LONG_BECAUSE} one loop."""\n{body}')
    assert long_functions(path) == []
    path.write_text(f"class C:\n    def method(self):\n{body.replace('    ', '        ')}")
    assert [hit.split(":", 1)[1] for hit in long_functions(path)] == ["2 method: 61 lines (> 60)"]


def tree_packages(text: str) -> set[str]:
    """The packages the layer tree of ARCHITECTURE.md names, one line each (``mcap/core/press/``
    at the start of a line of the first code block after "## Layers")."""
    start = text.index("```", text.index("## Layers")) + 3
    block = text[start:text.index("```", start)]
    return {line.split()[0].rstrip("/") for line in block.splitlines()
            if line.strip().startswith("mcap/")}


def test_the_architecture_tree_has_a_line_per_package():
    packages = {str(p.parent.relative_to(ROOT)) for p in (ROOT / "mcap").rglob("__init__.py")
                if p.parent != ROOT / "mcap"}
    named = tree_packages((ROOT / "ARCHITECTURE.md").read_text())
    assert not packages - named, f"ARCHITECTURE.md's tree lacks {sorted(packages - named)}"
    assert not named - packages, f"ARCHITECTURE.md's tree names no package {sorted(named - packages)}"


def test_the_tree_check_reads_the_layer_block():
    text = "x\n## Layers\n\n```\napp.py   pages\nmcap/a/   one\n  mcap/a/b/  two\n```\nmcap/c/\n"
    assert tree_packages(text) == {"mcap/a", "mcap/a/b"}
