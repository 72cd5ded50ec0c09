"""The job side: what runs inside a training job, on compute nodes.

Owns `iterator` (GavelIterator: preemption in under five lines), `progress`
(the progress records the daemon reads) and `templates` (the job templates'
PyTorch training code).

May import: the standard library and torch only. Never `core`, `policies`,
`estimator`, `slurm`, `sim`, numpy-heavy code or cvxpy, so that a job
imports fast and a compute node needs only torch and this folder.
"""
