"""Moved to slurm_gavel.slurm.backend.pairs.multi: this name is kept for old importers."""
from .backend.pairs.multi import *  # noqa: F401,F403
from .backend.pairs.multi import FIRST_VERSION, REQUIRED_FLAGS  # noqa: F401
