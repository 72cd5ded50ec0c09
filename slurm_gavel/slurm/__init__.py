"""The Slurm driver: everything that talks to a real Slurm cluster.

Owns `commands` (every Slurm command, argument lists only), `records`
(version-tolerant ``--json`` parsing), `flags` (the ``--comment "gavel ..."``
grammar), `config` (gavel.toml), `backend` (SlurmBackend), `store` (the SQLite
store), `daemon`, `queue` (gqueue), `jobscript` and `submit` (``slurm-gavel
submit``), `devcluster` (``slurm-gavel cluster up|down``), `history` (sacct: the jobs
that ran, for ``slurm-gavel replay``) and `billing` (``slurm-gavel billing``).

May import: `core`, `policies`, `estimator`, and `job.progress` (the record
format the jobs write). Never `sim`.
"""
