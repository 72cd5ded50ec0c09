"""Gavel's measured throughput tables and physical-cluster traces, shipped in the package.

The files in data/gavel/ are copied unchanged from stanford-futuredata/gavel (OSDI '20), under
the MIT License; its notice, data/gavel/LICENSE, ships with them, and data/gavel/README.md says
where each file comes from and what it holds. With them a plain install reproduces the paper's
tables and figures without fetching anything.
"""
from __future__ import annotations

from pathlib import Path

DIRECTORY = Path(__file__).resolve().parent / "data" / "gavel"


def gavel_data(name: str = "") -> Path:
    """The packaged copy of Gavel's file NAME, e.g. "simulation_throughputs.json",
    "physical_cluster_throughputs.json" or "traces/physical_cluster/small_test.trace" (the
    directory itself without NAME). FileNotFoundError when there is no such file."""
    path = DIRECTORY / name
    if not path.exists():
        raise FileNotFoundError(f"no {name!r} in the packaged Gavel data ({DIRECTORY})")
    return path
