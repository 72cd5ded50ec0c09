"""Another user made `.gavel/` first in a shared submit directory (writable by all), on the
real local cluster: the victim's job (a GavelIterator loop) writes no progress record there,
says so on stderr and still trains to the end; the daemon trusts nothing in that directory
and gqueue and explain say "no progress reports: <dir> is owned by another user"."""
from __future__ import annotations

import json
import os
import pwd
import subprocess
import sys
import time

import pytest

from tests.support.daemon import ROOT, start_daemon, stop_daemon, write_config

OTHER = "gavel-pdtest"         # created for this test when missing, removed afterwards

JOB = f"""#!/bin/bash
exec {sys.executable} - <<'PY'
import time
from slurm_gavel.job.iterator import GavelIterator
for step in GavelIterator(range(12), None, None, total_steps=12, progress_interval=0):
    time.sleep(1)
print("trained", flush=True)
PY
"""


@pytest.fixture
def other_user():
    created = False
    try:
        pwd.getpwnam(OTHER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin",
                        OTHER], check=True, capture_output=True)
        created = True
    try:
        yield pwd.getpwnam(OTHER).pw_uid
    finally:
        if created:
            subprocess.run(["userdel", OTHER], capture_output=True)


def _cli(*args):
    r = subprocess.run([sys.executable, "-m", "slurm_gavel", *args], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_a_progress_dir_another_user_made_first(clean, tmp_path, other_user):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    planted = shared / ".gavel"
    planted.mkdir()
    os.chmod(planted, 0o777)
    os.chown(planted, other_user, other_user)          # as if that user had made it first
    script = tmp_path / "job.sh"     # submitted from `shared`: SLURM_SUBMIT_DIR
    script.write_text(JOB)
    out = tmp_path / "out.txt"
    job = cluster.run(["sbatch", "--parsable", "--comment=gavel model=convnet steps=12",
                       "--gres=gpu:1", "-o", str(out),
                       f"--export=ALL,PYTHONPATH={ROOT},GAVEL_CHECKPOINT_DIR={tmp_path / 'ckpt'}",
                       str(script)], cwd=str(shared)).stdout.strip().split(";")[0]
    db = tmp_path / "gavel.db"
    daemon = start_daemon(config)
    said, told = "", ""
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            state = cluster.run(["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip()
            if db.exists() and state == "RUNNING":
                rows = json.loads(_cli("queue", "--db", str(db), "-j", job, "--json"))["jobs"]
                said = rows[0]["reason"] if rows else ""
                if "no progress reports" in said:
                    told = _cli("explain", job, "--db", str(db))
                    break
            if state in ("", "COMPLETED", "FAILED"):
                break
            time.sleep(1)
        while time.monotonic() < deadline and cluster.run(
                ["squeue", "-h", "-j", job, "-o", "%T"], check=False).stdout.strip():
            time.sleep(1)                                  # it trains to the end
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log
    assert said.startswith(f"no progress reports: {planted} is owned by another user "
                           f"(uid {other_user})"), said
    assert "no progress reports" in told, told
    text = out.read_text()
    assert f"{planted} is owned by another user (uid {other_user})" in text, text
    assert "training goes on" in text and "trained" in text, text
    assert list(planted.iterdir()) == []               # nothing written where that user rules
    assert f"{planted} is owned by another user" in log, log
