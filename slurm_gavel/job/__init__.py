"""The job side: what runs inside a training job, on compute nodes.

Owns `iterator` (GavelIterator: preemptible training loops, exact on resume),
`rngstate` (the random-number state its checkpoints keep), `progress` (the
progress records the daemon reads), the framework integrations `lightning`
(GavelCallback for Lightning), `hf` (GavelCallback for the Hugging Face
Trainer) and `accelerate` (GavelAccelerateIterator and the `accelerate launch`
wrapper), `launcher` (`slurm-gavel run`: torchrun and srun jobs whose every rank
is preempted and none outlives the job), `distributed` and `templates` (the job
templates' PyTorch training code).

May import: the standard library and torch only; `lightning`, `hf` and
`accelerate` import the framework they integrate lazily, when used. Never
`core`, `policies`, `estimator`, `slurm`, `sim`, numpy-heavy code or cvxpy, so
that a job imports fast and a compute node needs only torch and this folder.
"""
