"""Running `slurm-gavel simulate` in-process on a small generated workload."""
from __future__ import annotations

from slurm_gavel.cli import main


CLUSTER = "v100=2,p100=2,k80=2"


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def generated(table_path, *extra, jobs=12, rate=6):
    """Arguments of a small generated-workload simulation."""
    return ["simulate", "--policy", "max_min_fairness", "--throughputs", table_path,
            "--cluster", CLUSTER, "--rate", rate, "--jobs", jobs, *extra]
