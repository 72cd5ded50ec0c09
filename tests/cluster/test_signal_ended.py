"""A preemption signal sent to several jobs when one of them has just ended: scancel signals
the others and fails for the ended one ("Invalid job id specified", on 22.05.8 and 24.11.5
alike). That is no failure of the daemon: the ended job needs no signal and the next poll
sees it leave; so it is said at INFO, and no job gets an `action_failed` event."""
from __future__ import annotations

import logging
import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI, SlurmCommandError, ended_jobs


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


TRAP = "#!/bin/bash\ntrap 'echo got USR2 > \"$OUT/sig\"; exit 0' USR2\nwhile true; do sleep 1; done\n"


@pytest.fixture
def cluster(slurm_cluster):
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def test_a_signal_to_a_running_and_an_ended_job_reaches_the_running_one_and_is_no_error(
        cluster, tmp_path, caplog):
    (tmp_path / "trap.sh").write_text(TRAP)
    env = dict(cluster.env, OUT=str(tmp_path))

    def sbatch(*args):
        out = cluster.run(["sbatch", "--parsable", "-p", "v100", "-o", "/dev/null", *args],
                          env=env, cwd=tmp_path).stdout
        return out.strip().split(";")[0]

    ended, running = sbatch("--wrap", "true"), sbatch(str(tmp_path / "trap.sh"))
    cli = SlurmCLI(env=cluster.env)
    deadline = time.monotonic() + 40
    while True:
        state = {str(j["job_id"]): j for j in cli.squeue()["jobs"]}
        done = "COMPLETED" in str(state[ended]["job_state"])
        if done and "RUNNING" in str(state[running]["job_state"]):
            break
        assert time.monotonic() < deadline, state
        time.sleep(0.3)
    with pytest.raises(SlurmCommandError) as e:         # what the backend gets from Slurm
        cli.signal([ended], "USR2")
    assert ended_jobs(e.value.stderr, [ended]) == {ended}

    events = []
    backend = SlurmBackend(cli, WallClock(), on_event=lambda kind, job, detail: events.append((kind, job)))
    caplog.set_level(logging.INFO, logger="slurm_gavel")
    backend._signal_now([ended, running], "preempted by the test")
    deadline = time.monotonic() + 20
    while not (tmp_path / "sig").exists():
        assert time.monotonic() < deadline, "the running job got no signal"
        time.sleep(0.2)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert f"job {ended} had already ended" in caplog.text
    assert not [e for e in events if e[0] == "action_failed"], events
