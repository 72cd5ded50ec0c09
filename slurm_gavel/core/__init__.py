"""The policy-agnostic core: the data that crosses the narrow waist and the engine.

Owns `model` (PolicyInput, Allocation), `plan` (servers, assignments, a
round's plan), `ledger` (time received, churn), `mechanism` (priorities,
Algorithm 1, placement), `engine` (the loop that drives one round at a time),
`recompute` (the allocators: when a solve's result is used), `clock`,
`interfaces` (Backend, Store, ThroughputSource, Allocator: the abstract bases
the drivers' parts subclass) with the data they exchange in `backend`,
`store`, `throughputs` and `state`, plus `errors`, `inputs` (the JSON input
format) and `files`.

May import: the standard library and numpy. Never `policies`, `estimator`,
`slurm`, `sim` or `job`: the engine is handed an allocator (with its policy), a
backend, a store and a throughput source by its driver (the daemon or the simulator).
"""
