"""slurm-gavel: heterogeneity-aware scheduling (Gavel, OSDI '20) for Slurm GPU clusters.

The package follows the narrow waist of the paper:

    throughputs T --> policy --> allocation X --> mechanism --> placements --> backend

`slurm_gavel.core.model` holds the data that crosses it; `slurm_gavel.policies`
turns a `PolicyInput` into an `Allocation`.
"""
__version__ = "0.1.0"
