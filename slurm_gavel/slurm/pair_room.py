"""Moved to slurm_gavel.slurm.backend.pairs.room: this name is kept for old importers."""
from .backend.pairs.room import *  # noqa: F401,F403
