"""Alias of `slurm_gavel.job.iterator` (``from slurm_gavel.iterator import
GavelIterator`` is in users' training scripts: keep it).

The module lives in `slurm_gavel.job` (the job side); this name is the same
module object, so ``import slurm_gavel.iterator`` and ``import
slurm_gavel.job.iterator`` can be used interchangeably.
"""
import importlib
import sys

sys.modules[__name__] = importlib.import_module("slurm_gavel.job.iterator")
