"""The Slurm driver: everything that talks to a real Slurm cluster, and nothing else.

Owns `commands` (every Slurm command, argument lists only), `records`
(version-tolerant ``--json`` parsing, RequeueExitHold), `flags` (the ``--comment
"gavel ..."`` grammar; `flags.is_admin_comment` says whether a job is a gavel job),
`gputypes` (GPU type -> partition, GRES type or node set; the one partition -> GPU
types grouping), `feasibility`, `capacity` (a node's CPUs and memory in GPUs), `fairshare`, `userfiles`, `jobscript` (the job
templates `slurm-gavel submit` renders), `history` (sacct: the jobs that ran, for
``slurm-gavel replay``), `backend` (a package: the `SlurmBackend` facade over one `snapshot` per poll, `credit`, `starts`, `stops`, `holds`, `looks` (whether a tick polls), and `pairs` (sharing, multi, room)
for jobs that share GPUs), and the Slurm halves of three operator
commands: `doctor` (Slurm's configuration checks), `billing` (TRESBillingWeights from
speeds) and `undo` (release every held gavel job).

May import: `core`, `policies`, `estimator`, and `job.progress` (the record
format the jobs write).  Never `daemon`, `cli`, `devcluster` or `sim`.
"""
