"""The daemon runtime: the process that schedules a Slurm cluster round after round.

Owns `daemon` (the loop: poll Slurm, solve, enforce), `config` (gavel.toml),
`store` (the SQLite database every round is written to, and `migrations` of its
schema), `lock` (one daemon per database), `metrics` (Prometheus), `decisions`
(a round's starts and preemptions in words), `logs` (where the log goes),
`backup` (a consistent copy of the database), `views` (what `gqueue`, `explain`
and `events` read from the database) and `doctor` (the checks of the daemon's
own configuration, on top of the Slurm checks of `slurm.doctor`).

May import: `core`, `policies`, `estimator`, `slurm` (the driver).  Never
`cli`, `devcluster` or `sim`.
"""
