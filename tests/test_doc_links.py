"""Every relative link of the project's markdown resolves (issue 40 item 15: the manual moved
from README.md to docs/, and BENCHMARKS.md's dated log to bench/log/, so a link or a heading
named by an anchor could be left behind).

Pages checked: README.md, docs/*.md, BENCHMARKS.md, ARCHITECTURE.md, bench/README.md,
bench/log/*.md and data/PROVENANCE.md. A link ``[text](target)`` or ``![alt](target)`` that
is not a URL must name an existing file or folder relative to its page, and a ``#anchor``
must be a heading of the page it names, slugged as GitHub does. Links inside code (fenced
blocks and backticks) are not links. Also: bench/log/README.md lists every session file of
bench/log/, and every session file starts with a dated title.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
LOG = REPO / "bench" / "log"


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "BENCHMARKS.md",
            REPO / "ARCHITECTURE.md", REPO / "bench" / "README.md", *sorted(LOG.glob("*.md")),
            REPO / "data" / "PROVENANCE.md"]


def _without_code(text: str) -> str:
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def links(text: str) -> list[str]:
    """The targets of the markdown links of ``text`` (outside code)."""
    return re.findall(r"!?\[[^\]\n]*\]\(([^)\s]+)\)", _without_code(text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped,
    spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings (a repeated one gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M)
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def test_slug_is_githubs():
    assert slug("Evaluation and scaling (paper section 4)") == "evaluation-and-scaling-paper-section-4"
    assert slug("CPU or GPU") == "cpu-or-gpu"
    assert slug("`--out` and `scale`") == "--out-and-scale"
    assert links("see [a](b.md) and `[c](d.md)` and ![e](f.png)\n```\n[g](h.md)\n```\n") == \
        ["b.md", "f.png"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in links(page.read_text()):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(REPO)}")
    assert not broken, broken


def test_the_log_index_lists_every_session():
    listed = set(re.findall(r"\]\(([\w.-]+\.md)\)", (LOG / "README.md").read_text()))
    files = {p.name for p in LOG.glob("*.md")} - {"README.md"}
    assert files - listed == set(), f"bench/log/README.md does not list {sorted(files - listed)}"
    for name in files:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md", name), name
        title = (LOG / name).read_text().splitlines()[0]
        assert title.startswith("# " + name[:10]), (name, title)


def test_benchmarks_points_at_the_log():
    text = (REPO / "BENCHMARKS.md").read_text()
    assert "](bench/log/README.md)" in text
    assert "## Log" not in text  # the dated sections live in bench/log/, one file each
