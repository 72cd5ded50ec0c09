"""``python -m slurm_gavel.job.templates NAME --steps N``: run a template job (see train.py)."""
import sys

from .train import main

sys.exit(main())
