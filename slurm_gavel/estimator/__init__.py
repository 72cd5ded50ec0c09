"""Throughput sources: where a policy's throughputs T come from.

Owns `table` (ThroughputTable in Gavel's JSON layout, TableThroughputs),
`learning` (EstimatingThroughputs: measurements, hints, exploration,
matrix-completion fingerprints).  The ``slurm-gavel throughputs`` command that
shows, imports and exports them is `cli.throughputs`.

May import: `core` and numpy.
"""
