"""The job script warnings at a real sbatch: slurmctld's job_submit.lua says them to
the user (sbatch prints them), the job is still accepted and held, and a good script
gets no warning."""
from __future__ import annotations

import pytest

from slurm_gavel.slurm.scriptcheck import NO_EXEC, TORCHRUN

pytestmark = pytest.mark.slurm24


def sbatch(cluster, script: str, tmp_path):
    path = tmp_path / "job.sh"
    path.write_text(script)
    return cluster.run(["sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp",
                        "--comment=gavel model=resnet50", "--gres=gpu:1", str(path)],
                       check=False, cwd="/tmp")


def test_sbatch_says_the_warnings_and_accepts_the_job(slurm_cluster, tmp_path):
    ids = []
    try:
        bad = sbatch(slurm_cluster, "#!/bin/bash\ntorchrun --nproc-per-node 2 train.py\n", tmp_path)
        assert bad.returncode == 0, bad.stderr
        ids.append(bad.stdout.strip().split(";")[0])
        for message in (TORCHRUN.format(line=2), NO_EXEC.format(line=2)):
            assert message in bad.stderr, bad.stderr
        good = sbatch(slurm_cluster, "#!/bin/bash\nexec slurm-gavel run -- torchrun train.py\n",
                      tmp_path)
        assert good.returncode == 0, good.stderr
        ids.append(good.stdout.strip().split(";")[0])
        assert "gavel warning" not in good.stderr
        shown = slurm_cluster.run(["squeue", "-h", "-o", "%i %T %r", "-j", ",".join(ids)]).stdout
        assert sorted(line.split()[1:] for line in shown.splitlines()) == \
            [["PENDING", "JobHeldUser"]] * 2
    finally:
        if ids:
            slurm_cluster.run(["scancel", *ids], check=False)
