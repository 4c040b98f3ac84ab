"""What several test files share (ARCHITECTURE.md, "Tests"): the repository's paths, fixtures
that isolate a test from the user's store and data folder, and the oracles and random-case
builders that more than one test file checks mcap against.

The tree of tests/ mirrors mcap/: the test of ``mcap/X/Y.py`` is ``tests/X/test_Y.py``.
Helpers are plain functions, imported by name (``from tests.conftest import DATA``); the
fixtures are found by pytest."""
from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data"  # the bundled profiles, sweeps and scale files
FIXTURES = REPO / "tests" / "fixtures"  # files only the tests read
APP = str(REPO / "app.py")  # the dashboard, for AppTest.from_file
