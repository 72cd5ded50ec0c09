"""`python -m slurm_gavel` is the `slurm-gavel` command."""
import sys

from .cli import main

sys.exit(main())
