"""The daemon on a real local Slurm cluster: jobs start, are preempted, move, resume and finish.

Jobs are plain bash scripts that honour the preemption signal the way the
iterator will: on USR2 they save their step and exit with the requeue-hold
code.  Each run segment is logged by the job itself (partition, start and
end time), which is what Slurm really ran; the daemon's SQLite ledger must
agree with it.

The cases of tests/cluster/test_daemon.py that need no Slurm cluster.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time


def test_a_bad_config_is_refused_with_one_line(tmp_path):
    bad = tmp_path / "gavel.toml"
    bad.write_text('policy = "fastest_first"\n')
    done = subprocess.run([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "policy" in done.stderr and len(done.stderr.strip().splitlines()) == 1
