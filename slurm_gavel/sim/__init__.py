"""The simulator: a simulated cluster backend driving the same engine.

Owns `simulator` (SimulatedCluster, simulate, summarize), `workloads`
(traces, Gavel's trace format, the synthetic generator) and `experiments`
(run configurations, sweeps, CSV and plots) and `replay` (policies on a replayed
history against what Slurm did: cli.py feeds it slurm.history's records).

May import: `core`, `policies`, `estimator`. Never `slurm` or `job`.
"""
