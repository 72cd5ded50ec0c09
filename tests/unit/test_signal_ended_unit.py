"""A preemption signal sent to several jobs when one of them has just ended: scancel signals
the others and fails for the ended one ("Invalid job id specified", on 22.05.8 and 24.11.5
alike). That is no failure of the daemon: the ended job needs no signal and the next poll
sees it leave; so it is said at INFO, and no job gets an `action_failed` event.

The cases of tests/cluster/test_signal_ended.py that need no Slurm cluster.
"""
from __future__ import annotations

import pytest

from slurm_gavel.slurm.commands import ended_jobs


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


def test_what_scancel_says_of_an_ended_job_is_read_and_nothing_else_is():
    said = "scancel: error: Kill job error on job id 12: Invalid job id specified"
    assert ended_jobs(said, ["12", "13"]) == {"12"}
    assert ended_jobs(said + "\nscancel: error: Kill job error on job id 13: "
                      "Job/step already completing or completed", ["12", "13"]) == {"12", "13"}
    assert ended_jobs(said, ["13"]) is None                 # not one of ours
    assert ended_jobs(said + "\nscancel: error: Access/permission denied", ["12"]) is None
    assert ended_jobs("", ["12"]) is None
