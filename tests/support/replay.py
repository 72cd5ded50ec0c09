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
