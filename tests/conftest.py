"""Fixtures both tiers share, and the tier marks.

A test's tier is its directory: tests/unit (no Slurm, seconds each), tests/integration (no
Slurm, but whole processes that take minutes of CPU: real training runs, wheels built and
installed into fresh venvs) and tests/cluster (a real local Slurm cluster; its fixtures are in
tests/cluster/conftest.py). Each test gets the mark of its tier (`unit`, `integration` or
`cluster`), so `-m unit` selects the same tests as `tests/unit`.
The helpers that are not fixtures are in tests/support.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.engine import small_table
from tests.support.lua import LUAS, no_lua

TIERS = ("unit", "integration", "cluster")
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items):
    for item in items:
        parts = Path(str(item.path)).resolve().relative_to(HERE).parts
        if parts and parts[0] in TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))


@pytest.fixture(scope="module")
def table_path(tmp_path_factory) -> str:
    """A small throughput table (tests.support.engine.small_table) in Gavel's JSON format."""
    path = tmp_path_factory.mktemp("table") / "throughputs.json"
    small_table().to_gavel_json(path)
    return str(path)


@pytest.fixture(params=LUAS or [None], ids=[os.path.basename(p) for p in LUAS] or ["no-lua"])
def lua(request):
    """Each Lua interpreter found (the plugin must run on all of them)."""
    if request.param is None:
        no_lua()
    return request.param
