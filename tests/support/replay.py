"""A Slurm CLI that answers from recorded command output (tests/fixtures), for the daemon's
decisions without a cluster."""
from __future__ import annotations

import copy
import json
from pathlib import Path

from slurm_gavel.slurm.commands import SlurmCommandError


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


class ReplayCLI:
    """squeue / nodes from recordings; actions are recorded, and change the job's state."""

    def __init__(self):
        data = json.loads((FIXTURES / "squeue-shapes-22.05.json").read_text())
        self.job = next(j for j in data["jobs"] if j["job_id"] == 5)
        self.nodes_data = json.loads((FIXTURES / "sinfo-22.05.json").read_text())
        self.actions = []

    def squeue(self):
        return {"jobs": [copy.deepcopy(self.job)]}

    def nodes(self):
        return self.nodes_data

    def update(self, ids, **fields):
        self.actions.append(("update", tuple(ids)))

    def update_each(self, updates):
        """SlurmCLI.update_each's contract, one after the other: the failures by job."""
        failures = {}
        for job, fields in updates:
            try:
                self.update([job], **fields)
            except SlurmCommandError as e:
                failures[job] = e
        return failures

    def release(self, ids):
        self.actions.append(("release", tuple(ids)))
        self.job["state_reason"] = "Resources"      # released, but Slurm does not start it

    def hold(self, ids):
        self.actions.append(("hold", tuple(ids)))
        self.job["state_reason"] = "JobHeldAdmin"


class QueueCLI(ReplayCLI):
    """A queue of gavel jobs in the recorded 22.05 shape that a test changes (`add`, `jobs`),
    read in full (`squeue`, `nodes`) or with the cheap look (`job_states`, as SlurmCLI's);
    `reads` counts each.  A release leaves the job pending (the test starts it: `run`)."""

    def __init__(self):
        super().__init__()
        self.template = self.job
        self.jobs: dict[str, dict] = {}
        self.reads: dict[str, int] = {"squeue": 0, "nodes": 0, "job_states": 0}

    def add(self, job_id: int, on: str | None = None, at: float = 0.0, index: int = 0, **fields) -> dict:
        """A held gavel job `job_id`, or with `on` a node, running there on one GPU (`index`)
        since `at`."""
        job = dict(copy.deepcopy(self.template), job_id=job_id, **fields)
        self.jobs[str(job_id)] = job
        if on is not None:
            self.run(job_id, on, at, index)
        return job

    def run(self, job_id, on: str, at: float, index: int = 0) -> None:
        self.jobs[str(job_id)].update(
            job_state="RUNNING", nodes=on, partition=on.split("-")[0], start_time=int(at),
            gres_detail=[f"gpu:{on.split('-')[0]}:1(IDX:{index})"], state_reason="None", priority=1)

    def end(self, job_id, at: float, state: str = "COMPLETED") -> None:
        self.jobs[str(job_id)].update(job_state=state, end_time=int(at))

    def squeue(self):
        self.reads["squeue"] += 1
        return {"jobs": copy.deepcopy(list(self.jobs.values()))}

    def nodes(self):
        self.reads["nodes"] += 1
        return self.nodes_data

    def job_states(self):
        self.reads["job_states"] += 1
        return {job: j["job_state"] for job, j in self.jobs.items()}

    def config(self):
        return {"RequeueExitHold": "85"}

    def accounting(self):
        return False

    def release(self, ids):
        self.actions.append(("release", tuple(ids)))
        for job in ids:
            self.jobs[str(job)].update(priority=1, state_reason="Resources")

    def hold(self, ids):
        self.actions.append(("hold", tuple(ids)))
        for job in ids:
            self.jobs[str(job)].update(priority=0, state_reason="JobHeldAdmin")

    def signal(self, ids, signal, full=False):
        self.actions.append(("signal", tuple(ids)))

    def requeue_hold(self, ids):
        self.actions.append(("requeuehold", tuple(ids)))
        for job in ids:
            self.jobs[str(job)].update(job_state="PENDING", nodes="", gres_detail=[], priority=0,
                                       state_reason="JobHeldAdmin")
