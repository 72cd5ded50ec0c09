"""Alias of `slurm_gavel.job.templates`: ``python -m slurm_gavel.templates NAME``.

Job scripts rendered before the training code moved into `slurm_gavel.job` call this
name; it runs the same training code as ``python -m slurm_gavel.job.templates``.
"""
import sys

if __name__ == "__main__":
    from slurm_gavel.job.templates.train import main

    sys.exit(main())
