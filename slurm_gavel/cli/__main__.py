"""`python -m slurm_gavel.cli` is the `slurm-gavel` command (as `python -m slurm_gavel`)."""
import sys

from . import main

sys.exit(main())
