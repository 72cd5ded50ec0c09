"""The job templates' training code: real PyTorch models made preemptible.

``python -m slurm_gavel.job.templates NAME --steps N --gpus G`` runs one
(train.py; models.py builds the model). The sbatch scripts that call it are
in the repository's ``job_templates/`` and are filled in by
`slurm_gavel.slurm.jobscript`. Like the rest of `slurm_gavel.job`, this
imports only the standard library and torch.
"""
