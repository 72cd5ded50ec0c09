"""Where the bench scripts find Gavel's data files: the copy shipped in the package
(slurm_gavel/estimator/data/gavel, with its MIT notice)."""
from __future__ import annotations

from slurm_gavel.estimator.gavel_data import gavel_data

__all__ = ["gavel_data"]
