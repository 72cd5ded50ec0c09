"""Where the bench scripts find Gavel's data files (not part of the project).

Beside the repository (`../shared/data/gavel`, where CI has it), or beside a
worktree's parent (`../../shared/...`, for a checkout under a folder of worktrees).
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gavel_data(name: str) -> Path:
    """The first existing `shared/data/gavel/NAME` beside the repository, else the usual path."""
    for base in (ROOT.parent, ROOT.parent.parent):
        path = base / "shared" / "data" / "gavel" / name
        if path.exists():
            return path
    return ROOT.parent / "shared" / "data" / "gavel" / name
