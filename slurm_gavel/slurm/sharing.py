"""Moved to slurm_gavel.slurm.backend.pairs (sharing.py): this name is kept for old importers."""
from .backend.pairs.sharing import PairLimit as SpaceSharing  # noqa: F401
