"""`SlurmBackend.job_status` (gqueue's view of every gavel job) is linear in the jobs: each
waiting job's words about CPUs (`_cpu_words`) once scanned every other job for the GPUs they
hold, a scan per job, so 5,000 queued jobs cost 25 million visits.  Counted here as visits
of a job's `running` (every scan over the jobs reads it), not timed: four times the queue
costs at most four times the visits.  Slurm's side is the recorded 22.05 queue and nodes
(tests/fixtures), its pending gavel job copied N times beside its running one."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.records import SlurmJob

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


class QueueCLI:
    """A recorded Slurm whose queue is the running gavel job 1 and N copies of pending job 2."""

    def __init__(self, waiting: int):
        data = json.loads((FIXTURES / "squeue-22.05.json").read_text())
        by_id = {j["job_id"]: j for j in data["jobs"]}
        jobs = [by_id[1], by_id[4]]
        for i in range(waiting):
            j = copy.deepcopy(by_id[2])
            j["job_id"] = 100 + i
            jobs.append(j)
        self.data = dict(data, jobs=jobs)
        self.node_data = json.loads((FIXTURES / "sinfo-22.05.json").read_text())

    def squeue(self):
        return copy.deepcopy(self.data)

    def nodes(self):
        return self.node_data


def visits(waiting: int, monkeypatch) -> tuple[int, dict]:
    backend = SlurmBackend(QueueCLI(waiting), SimulatedClock(1796032600.0))
    backend.observe()
    count = [0]
    running = SlurmJob.running

    def counted(self):
        count[0] += 1
        return running.fget(self)
    monkeypatch.setattr(SlurmJob, "running", property(counted))
    status = backend.job_status()
    monkeypatch.setattr(SlurmJob, "running", running)
    return count[0], status


def test_job_status_visits_grow_linearly_with_the_queue(monkeypatch):
    small, status = visits(10, monkeypatch)
    large, status_large = visits(40, monkeypatch)
    waiting = [s for job, s in status_large.items() if s["state"] == "PD"]
    assert len(waiting) == 40 and status_large["1"]["state"] == "R", status_large
    assert status["100"] == status_large["100"]          # the same words for the same job
    assert large <= 4 * small + 8, (small, large)         # a scan per job: 16 times
