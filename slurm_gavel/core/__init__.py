"""The policy-agnostic core: the data that crosses the narrow waist and the engine.

Owns `model` (PolicyInput, Allocation), `mechanism` (ledger, priorities,
rounds, placement), `engine` (the loop that drives one round at a time),
`recompute` (when a solve's result is used), `clock`, and the interfaces
`backend`, `store` and `throughputs`, plus `errors`, `inputs` (the JSON input
format) and `files`.

May import: the standard library and numpy. Never `policies`, `estimator`,
`slurm`, `sim` or `job`: the engine is handed a policy, a backend, a store
and a throughput source by its driver (the daemon or the simulator).
"""
