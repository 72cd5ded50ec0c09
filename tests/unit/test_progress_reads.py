"""Which progress files a poll reads (issue 25): only those of jobs that run or stopped since
the last read, so a quiet poll's file reads do not grow with the waiting queue, while a
running job's new report is seen at the next poll and a waiting job keeps the steps it
reported.  Slurm's side is the recorded 22.05 queue and nodes (tests/fixtures): its running
gavel job 1 and N copies of pending job 2, all of this user, working in tmp_path; the
files are real and read by the real `UserFiles`; the opens are counted at `read_tail`."""
from __future__ import annotations

import copy
import getpass
import json
from pathlib import Path

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.job.progress import append_record
from slurm_gavel.slurm import userfiles
from slurm_gavel.slurm.backend import SlurmBackend

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


class QueueCLI:
    """The running gavel job 1 and `waiting` copies of pending job 2 (ids 100...)."""

    def __init__(self, waiting: int, work_dir: Path):
        data = json.loads((FIXTURES / "squeue-22.05.json").read_text())
        by_id = {j["job_id"]: j for j in data["jobs"]}
        jobs = [copy.deepcopy(by_id[1])]
        for i in range(waiting):
            j = copy.deepcopy(by_id[2])
            j["job_id"] = 100 + i
            jobs.append(j)
        for j in jobs:
            j.update(user_name=getpass.getuser(), current_working_directory=str(work_dir))
        self.data = dict(data, jobs=jobs)
        self.node_data = json.loads((FIXTURES / "sinfo-22.05.json").read_text())

    def job(self, job_id: int) -> dict:
        return next(j for j in self.data["jobs"] if j["job_id"] == job_id)

    def squeue(self):
        return copy.deepcopy(self.data)

    def nodes(self):
        return self.node_data


def report(work_dir: Path, job_id: str, step: int) -> None:
    d = work_dir / ".gavel"
    d.mkdir(exist_ok=True)
    append_record(d / f"{job_id}.jsonl", {"event": "progress", "step": step, "partition": "v100",
                                           "steps_per_second": 2.0})


def counting(monkeypatch) -> list[str]:
    opened: list[str] = []
    real = userfiles.read_tail

    def counted(path, **kw):
        opened.append(str(path))
        return real(path, **kw)
    monkeypatch.setattr(userfiles, "read_tail", counted)
    return opened


def quiet_reads(waiting: int, tmp_path: Path, monkeypatch) -> int:
    work = tmp_path / f"w{waiting}"
    work.mkdir()
    report(work, "100", 7)                  # a waiting job that ran before: its report stays
    backend = SlurmBackend(QueueCLI(waiting, work), SimulatedClock(1796032600.0))
    opened = counting(monkeypatch)
    first = backend.observe()
    assert len(opened) >= waiting           # the first poll reads every job's files once
    assert first.steps_done.get("100") == 7.0
    opened.clear()
    quiet = backend.observe()
    assert quiet.steps_done.get("100") == 7.0, quiet.steps_done
    return len(opened)


def test_a_quiet_poll_reads_as_many_files_at_4_as_at_40_waiting_jobs(tmp_path, monkeypatch):
    small = quiet_reads(4, tmp_path, monkeypatch)
    large = quiet_reads(40, tmp_path, monkeypatch)
    assert small == large, (small, large)
    assert 1 <= small <= 2                  # the running job's file (and its Slurm id's name)


def test_a_running_jobs_new_report_is_seen_at_the_next_poll(tmp_path, monkeypatch):
    cli = QueueCLI(3, tmp_path)
    backend = SlurmBackend(cli, SimulatedClock(1796032600.0))
    report(tmp_path, "1", 5)
    assert backend.observe().steps_done.get("1") == 5.0
    report(tmp_path, "1", 9)
    assert backend.observe().steps_done.get("1") == 9.0


def test_a_job_that_stopped_since_the_last_read_is_read_once_more(tmp_path, monkeypatch):
    cli = QueueCLI(3, tmp_path)
    backend = SlurmBackend(cli, SimulatedClock(1796032600.0))
    report(tmp_path, "1", 5)
    backend.observe()
    report(tmp_path, "1", 12)               # its last words, then Slurm requeues it
    cli.job(1).update(job_state="PENDING", state_reason="JobHeldUser", restart_cnt=1)
    opened = counting(monkeypatch)
    assert backend.observe().steps_done.get("1") == 12.0
    assert any(p.endswith("/1.jsonl") for p in opened)
    opened.clear()
    assert backend.observe().steps_done.get("1") == 12.0
    assert opened == []                     # waiting, read already: its report is kept
