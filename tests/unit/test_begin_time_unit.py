"""A user's begin time (sbatch --begin) is kept: read from Slurm's JSON (both versions'
recordings), told apart from Slurm's own requeue delay, and said in words.

The cluster half (the daemon neither plans nor releases such a job early, gqueue says
why) is tests/cluster/test_begin_time.py.
"""
from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import pytest

from slurm_gavel.slurm.backend.holds import begin_text
from slurm_gavel.slurm.records import parse_jobs

pytestmark = pytest.mark.slurm24

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SQUEUE = {"22.05": "squeue-22.05.json", "24.11": "squeue-24.11.json"}
NOW = 1796032600.0


def _jobs(version, **changes):
    data = json.loads((FIXTURES / SQUEUE[version]).read_text())
    data = copy.deepcopy(data)
    for raw in data["jobs"]:
        for name, (key, value) in changes.items():
            if raw["name"] == name:
                old = raw.get(key)
                raw[key] = dict(old, number=value) if isinstance(old, dict) else value
    return {j.name: j for j in parse_jobs(data)}


@pytest.mark.parametrize("version", sorted(SQUEUE))
def test_a_held_job_begins_at_its_eligible_time(version):
    # recorded as Slurm 22.05 shows it: a gavel job submitted with --begin and held by
    # job_submit.lua keeps the begin time as its eligible time (0 when none was asked)
    jobs = _jobs(version, **{"gavel-held": ("eligible_time", NOW + 600)})
    assert jobs["gavel-held"].begins_after(NOW) == NOW + 600
    assert jobs["gavel-held"].begins_after(NOW + 600) is None      # the time has come


@pytest.mark.parametrize("version", sorted(SQUEUE))
def test_no_begin_time_without_one_or_after_a_requeue(version):
    jobs = _jobs(version)
    assert jobs["gavel-held"].begins_after(NOW) is None        # eligible_time 0: none asked
    # requeued held (restart 1): its eligible time is Slurm's requeue delay (about two
    # minutes ahead), which the daemon overrides when it starts the job again
    requeued = jobs["gavel-requeued"]
    assert requeued.restarts == 1 and requeued.begins_after(NOW - 600) is None
    assert jobs["gavel-run"].begins_after(NOW - 600) is None     # running


def test_begin_text_says_the_time_and_the_day_when_not_within_a_day():
    begin = time.mktime((2026, 12, 3, 18, 45, 0, 0, 0, -1))
    assert begin_text(begin, begin - 600) == "waits for its begin time 18:45"
    assert begin_text(begin, begin - 2 * 86400) == "waits for its begin time 2026-12-03 18:45"
