"""The job side: what runs inside a training job, on compute nodes.

Owns `iterator` (GavelIterator: preemptible training loops, exact on resume),
`rngstate` (the random-number state its checkpoints keep), `progress`
(the progress records the daemon reads) and `templates` (the job templates'
PyTorch training code).

May import: the standard library and torch only. Never `core`, `policies`,
`estimator`, `slurm`, `sim`, numpy-heavy code or cvxpy, so that a job
imports fast and a compute node needs only torch and this folder.
"""
