"""slurm_gavel.job.progress: the file location contract, appends, and a reader that
tolerates torn lines (no torch)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from slurm_gavel.job.progress import (append_record, candidate_paths, latest, progress_path,
                                      read_progress, summary)


def test_location_contract(tmp_path):
    assert progress_path("42", env={"GAVEL_PROGRESS_DIR": "/spool", "SLURM_SUBMIT_DIR": "/home/u"}) \
        == Path("/spool/42.jsonl")
    assert progress_path("42", env={"SLURM_SUBMIT_DIR": "/home/u"}) == Path("/home/u/.gavel/42.jsonl")
    assert progress_path(42, env={}, work_dir="/w") == Path("/w/.gavel/42.jsonl")
    assert candidate_paths("42", "/w", "/spool") == [Path("/spool/42.jsonl"), Path("/w/.gavel/42.jsonl")]
    assert candidate_paths("42", None) == []
    for bad in ("", "../x", "a/b"):
        with pytest.raises(ValueError):
            progress_path(bad, env={})


def test_appends_accumulate_and_a_torn_last_line_is_skipped(tmp_path):
    path = tmp_path / "d" / "1.jsonl"                  # the directory is created
    assert read_progress(path) == [] and latest(path) is None
    append_record(path, {"event": "start", "step": 0, "partition": "v100", "steps_per_second": None})
    append_record(path, {"event": "progress", "step": 50, "partition": "v100", "steps_per_second": 2.5})
    append_record(path, {"event": "checkpoint", "step": 60, "partition": "v100", "steps_per_second": 2.0})
    # a second process (a restart) appends to the same file
    code = ("from slurm_gavel.job.progress import append_record; import sys; "
            "append_record(sys.argv[1], {'event': 'start', 'step': 60, 'partition': 'k80', "
            "'steps_per_second': None})")
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    with open(path, "ab") as f:
        f.write(b'{"event": "progress", "step": 7')          # torn: killed in the middle
    records = read_progress(path)
    assert [(r["event"], r["step"]) for r in records] == \
        [("start", 0), ("progress", 50), ("checkpoint", 60), ("start", 60)]
    assert latest(path)["partition"] == "k80"
    s = summary(records)
    assert s["step"] == 60 and s["partition"] == "k80" and s["steps_per_second"] is None
    assert not s["done"]
    # a line torn in the middle of the file (then completed ones after it)
    with open(path, "ab") as f:
        f.write(b"\n")
    append_record(path, {"event": "done", "step": 100, "partition": "k80", "steps_per_second": 4.0})
    records = read_progress(path)
    assert [r["event"] for r in records][-1] == "done" and len(records) == 5
    s = summary(records)
    assert s["done"] and s["steps_per_second"] == 4.0 and s["step"] == 100
    for line in path.read_bytes().splitlines()[:3]:
        json.loads(line)                                     # one JSON object per line


def test_summary_rate_comes_from_the_current_partition():
    records = [{"event": "progress", "step": 10, "partition": "v100", "steps_per_second": 9.0},
               {"event": "start", "step": 10, "partition": "k80", "steps_per_second": None}]
    assert summary(records)["steps_per_second"] is None
    records.append({"event": "progress", "step": 12, "partition": "k80", "steps_per_second": 1.5})
    assert summary(records)["steps_per_second"] == 1.5
    assert summary([]) is None


def test_lost_seconds_add_up_over_runs_from_the_file(tmp_path, monkeypatch):
    """write_record: a run adds its checkpoint saves and, after a requeue, its start-up (the
    process's age at its start record) to what the file's newest record says earlier runs
    lost; the first run's start-up is not lost to a preemption; the daemon's summary reads it."""
    from slurm_gavel.job import progress
    path = tmp_path / "7.jsonl"
    monkeypatch.setattr(progress, "_lost_before", {})
    monkeypatch.setattr(progress, "_lost_here", {})
    monkeypatch.setattr(progress, "_process_age", lambda: 4.0)
    progress.write_record(path, {"event": "start", "step": 0, "restart": 0})
    progress.write_record(path, {"event": "progress", "step": 5, "restart": 0})
    progress.write_record(path, {"event": "checkpoint", "step": 9, "restart": 0, "save_seconds": 1.5})
    assert [r["lost_seconds"] for r in read_progress(path)] == [0.0, 0.0, 1.5]
    # the next run: a new process
    monkeypatch.setattr(progress, "_lost_before", {})
    monkeypatch.setattr(progress, "_lost_here", {})
    progress.write_record(path, {"event": "start", "step": 9, "restart": 1, "load_seconds": 0.5})
    progress.write_record(path, {"event": "checkpoint", "step": 12, "restart": 1, "save_seconds": 2.0})
    assert [r["lost_seconds"] for r in read_progress(path)][3:] == [5.5, 7.5]
    assert summary(read_progress(path))["lost_seconds"] == 7.5
    # a record a user wrote by hand with nonsense in it counts as nothing
    append_record(path, {"event": "progress", "step": 13, "lost_seconds": -3})
    assert summary(read_progress(path))["lost_seconds"] == 7.5
    append_record(path, {"event": "progress", "step": 13, "lost_seconds": "lots"})
    assert summary(read_progress(path))["lost_seconds"] == 7.5
    assert summary([{"event": "start", "step": 0}])["lost_seconds"] is None


def test_process_age_is_measured():
    from slurm_gavel.job.progress import _process_age
    age = _process_age()
    assert age is not None and 0 <= age < 24 * 3600


def test_lost_seconds_are_never_read_through_a_fifo_or_a_symlink(tmp_path):
    """The tail read for lost_seconds opens only a regular file of the job's user: a FIFO or a
    symlink planted in a shared directory neither blocks the job nor feeds it numbers."""
    import os
    from slurm_gavel.job.progress import _lost_so_far
    real = tmp_path / "real.jsonl"
    append_record(real, {"event": "checkpoint", "lost_seconds": 9.0})
    assert _lost_so_far(real) == 9.0
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert _lost_so_far(tmp_path / "fifo.jsonl") == 0.0          # returns at once
    (tmp_path / "link.jsonl").symlink_to(real)
    assert _lost_so_far(tmp_path / "link.jsonl") == 0.0
    assert _lost_so_far(tmp_path / "missing.jsonl") == 0.0
