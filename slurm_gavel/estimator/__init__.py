"""Throughput sources: where a policy's throughputs T come from.

Owns `table` (ThroughputTable in Gavel's JSON layout, TableThroughputs),
`learning` (EstimatingThroughputs: measurements, hints, exploration,
matrix-completion fingerprints) and `cli` (``slurm-gavel throughputs``).

May import: `core` and numpy. `cli` also opens the daemon's SQLite store
(`slurm.store`) where it reads measurements.
"""
