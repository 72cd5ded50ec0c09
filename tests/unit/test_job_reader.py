"""records.JobReader: the incremental `parse_jobs` of the backend's poll (issue 25).  It gives
what parse_jobs gives for every recorded Slurm version, parses a record again only when a
field parse_jobs reads changed (not for slurmctld's per-pass `last_sched_evaluation`), and
hands back the same objects for the others."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurm_gavel.slurm.records import JobReader, parse_jobs

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SQUEUES = sorted(p.name for p in FIXTURES.glob("squeue-*.json"))


def load(name: str) -> dict:
    """A recorded `squeue --json` (of a recording of several polls, the last)."""
    data = json.loads((FIXTURES / name).read_text())
    return data["polls"][-1]["squeue"] if "polls" in data else data


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_recorded_polls_in_turn_read_as_parse_jobs_reads_each(version):
    polls = json.loads((FIXTURES / f"squeue-pertask-{version}.json").read_text())["polls"]
    reader = JobReader()
    for poll in polls:
        assert reader.parse(poll["squeue"]) == parse_jobs(poll["squeue"])


@pytest.mark.parametrize("name", SQUEUES)
def test_it_reads_what_parse_jobs_reads_and_a_second_poll_of_the_same_records_parses_none(name):
    data = load(name)
    reader = JobReader()
    first = reader.parse(copy.deepcopy(data))
    assert first == parse_jobs(data) and reader.reparsed == len(data["jobs"])
    again = reader.parse(copy.deepcopy(data))       # a new poll: new JSON, the same content
    assert again == first and reader.reparsed == 0
    assert all(a is b for a, b in zip(again, first))


@pytest.mark.parametrize("name", SQUEUES)
def test_a_changed_field_parses_that_record_again_and_an_unread_one_does_not(name):
    data = load(name)
    reader = JobReader()
    reader.parse(copy.deepcopy(data))
    changed = copy.deepcopy(data)
    for j in changed["jobs"]:
        j["last_sched_evaluation"] = 42          # slurmctld's, every pass; parse_jobs ignores it
    changed["jobs"][0]["admin_comment"] = "gavel:v1 model=other"
    changed["jobs"][-1]["nodes"] = "elsewhere-9"
    jobs = reader.parse(changed)
    assert reader.reparsed == min(2, len(changed["jobs"]))
    assert jobs == parse_jobs(changed)
    first_id = str(changed["jobs"][0]["job_id"])
    assert any(j.admin_comment == "gavel:v1 model=other" for j in jobs if j.slurm_id == first_id)


def test_new_and_gone_records():
    data = load("squeue-22.05.json")
    reader = JobReader()
    reader.parse({"jobs": data["jobs"][:3]})
    jobs = reader.parse({"jobs": data["jobs"][1:]})     # the first gone, the last three new
    assert reader.reparsed == len(data["jobs"]) - 3
    assert jobs == parse_jobs({"jobs": data["jobs"][1:]})
    reader.parse({"jobs": data["jobs"][:1]})             # it was forgotten: parsed again
    assert reader.reparsed == 1
