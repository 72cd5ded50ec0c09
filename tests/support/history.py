"""Slurm's job history turned into replay records, as `slurm-gavel replay` does."""
from __future__ import annotations

from slurm_gavel.sim.replay import build as build_records
from slurm_gavel.slurm.history import replay_records


def build(history, table, types, pattern=None, speeds=None):
    """slurm.history's records of `history`, through sim.replay.build (what the command does)."""
    return build_records(replay_records(history, pattern), table, types, speeds)
