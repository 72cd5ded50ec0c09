"""The command line: `slurm-gavel` (`python -m slurm_gavel`) and `gqueue`.

Every command lives here: its argparse, its printing, its exit code.  A command
parses, calls the library of the room that owns the concern (`slurm` for Slurm,
`daemon` for the daemon's database and configuration, `sim` for simulations,
`estimator` for throughput tables, `devcluster` for the local test cluster),
and prints; `common` holds what every command shares (--db/--config, --json,
the table aligner, the one error -> exit-code map).

May import every other folder.  Nothing imports `cli`.
"""
from .main import main

__all__ = ["main"]
