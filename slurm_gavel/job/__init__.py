"""The job side: what runs inside a training job, on compute nodes.

Owns `iterator` (GavelIterator: preemption in under five lines), `progress`
(the progress records the daemon reads), `hf` (GavelCallback for the Hugging
Face Trainer), `accelerate` (GavelAccelerateIterator and the `accelerate launch`
wrapper), `distributed` and `templates` (the job templates' PyTorch training code).

May import: the standard library and torch only; `hf` and `accelerate` import
the framework they integrate (transformers, accelerate) lazily, when used. Never `core`, `policies`,
`estimator`, `slurm`, `sim`, numpy-heavy code or cvxpy, so that a job
imports fast and a compute node needs only torch and this folder.
"""
