"""The held jobs' status in Slurm (AdminComment) is written for at most a budget of jobs a
round (Slurm updates a list of ids one RPC per job), jobs that show none yet first."""
from __future__ import annotations

from slurm_gavel.slurm.backend.holds import STATUS_PER_ROUND, status_batches

FLAGS = "gavel:v1 model=x"
WAIT = f"{FLAGS} | held by slurm-gavel: waiting for its round (others have higher priority)"
NONE = f"{FLAGS} | held by slurm-gavel: no allocation on any type (the policy gives it no GPU time now)"


def test_the_budget_counts_jobs_not_calls_and_unmarked_jobs_go_first():
    groups = {WAIT: [str(i) for i in range(1, 301)], NONE: ["400", "401", "402"]}
    comments = {str(i): NONE for i in range(1, 301)}         # 1-300 show the other status
    comments.update({"400": FLAGS, "401": FLAGS, "402": FLAGS})   # never marked
    batches = status_batches(groups, comments, 50)
    written = [job for _, jobs in batches for job in jobs]
    assert len(written) == 50 and len(set(written)) == 50
    assert dict(batches)[NONE] == ["400", "401", "402"]           # the unmarked first
    assert dict(batches)[WAIT] == [str(i) for i in range(1, 48)]  # then the changed, in order
    assert len(batches) == 2                                     # one call per text


def test_within_the_budget_every_change_is_written_and_nothing_else():
    groups = {WAIT: ["1", "2"]}
    assert status_batches(groups, {"1": FLAGS, "2": NONE}, STATUS_PER_ROUND) == [(WAIT, ["1", "2"])]
    assert status_batches({}, {}, STATUS_PER_ROUND) == []
    assert status_batches(groups, {}, 0) == []
