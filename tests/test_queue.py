"""`gqueue`: the store written by the real engine, shown as people read it."""
from __future__ import annotations

import json

from slurm_gavel.queue import main

from test_sqlite_store import run


def test_gqueue_shows_each_job_and_why_it_waits(tmp_path, capsys):
    db = tmp_path / "state.db"
    run(db, rounds=20, n_jobs=6)
    assert main(["--db", str(db)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["JOBID", "USER", "NAME", "ST", "TYPE"]
    assert "SHARE(" in out[0] and "REASON" in out[0]
    running = [line for line in out[1:] if line.split()[3] == "R"]
    waiting = [line for line in out[1:] if line.split()[3] == "PD"]
    assert running and waiting
    assert all("waiting for its round" in line or "allocation" in line or "pending" in line
               for line in waiting)


def test_gqueue_json_filters_and_columns(tmp_path, capsys):
    db = tmp_path / "state.db"
    run(db, rounds=20, n_jobs=6)
    assert main(["--db", str(db), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["worker_types"] and data["jobs"]
    job = data["jobs"][0]["jobid"]
    assert main(["--db", str(db), "-j", job, "-o", "jobid,st,reason"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOBID", "ST", "REASON"] and len(lines) == 2
    assert main(["--db", str(db), "--cluster"]) == 0
    cluster = capsys.readouterr().out.splitlines()
    assert cluster[0].split() == ["TYPE", "GPUS", "BUSY", "GAVEL_SHARE", "UTIL"] and len(cluster) == 4


def test_gqueue_errors_are_one_line(tmp_path, capsys):
    assert main(["--db", str(tmp_path / "none.db")]) == 2
    assert "no database" in capsys.readouterr().err
    db = tmp_path / "state.db"
    run(db, rounds=1, n_jobs=2)
    assert main(["--db", str(db), "-o", "jobid,colour"]) == 2
    assert "colour" in capsys.readouterr().err
