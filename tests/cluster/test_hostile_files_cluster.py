"""Users cannot stall, crash or fool the daemon through files or text, on the real local Slurm cluster:
a FIFO and a symlink to /etc/shadow as progress files, a job name full of terminal
escapes -- rounds go on, SIGTERM stops the daemon at once, gqueue prints it all escaped."""
from __future__ import annotations

import os
import re
import shutil
import signal
import threading
import time
from pathlib import Path

from slurm_gavel.core.display import printable
from slurm_gavel.cli.queue import main as gqueue

from tests.support.daemon import start_daemon, stop_daemon, submit, write_config
from tests.support.output import strict_json

EVIL_NAME = "x\x1b]0;owned\x07\x1b[31mred\nFAKE 1 root R\u202eabc\rz"
RAW = ("\x1b", "\x07", "\u202e", "\r")



def _rounds(lines) -> int:
    """Rounds the daemon has logged: distinct numbers, since a round's decisions
    (each start and preemption) are lines of their own that name the round too."""
    return len({m.group(1) for x in lines for m in [re.search(r"round (\d+): ", x)] if m})

def test_a_fifo_and_a_symlink_for_progress_files_neither_stall_nor_fool_the_daemon(clean, tmp_path, capsys):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    work = tmp_path / "work"
    (work / ".gavel").mkdir(parents=True)
    # the daemon reads both candidates of each job every tick: the spool, then the work dir
    fifo_job = submit(cluster, tmp_path, "convnet", 2, 30, extra=["-D", str(work)])
    link_job = submit(cluster, tmp_path, "convnet", 2, 30, extra=["-D", str(work)])
    os.mkfifo(work / ".gavel" / f"{fifo_job}.jsonl")
    os.symlink("/etc/shadow", work / ".gavel" / f"{link_job}.jsonl")
    named = submit(cluster, tmp_path, "convnet", 1, 30, extra=["-J", EVIL_NAME])
    daemon = start_daemon(config)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(daemon.stdout), daemon=True)
    reader.start()             # (a blocked daemon prints nothing: never wait on its output)
    try:
        deadline = time.time() + 40
        while time.time() < deadline and _rounds(lines) < 4:
            time.sleep(0.5)
        assert _rounds(lines) >= 4, "".join(lines)[-3000:]
        stopped = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
        took = time.monotonic() - stopped
    finally:
        if daemon.poll() is None:
            daemon.kill()               # by its pid (Popen)
            daemon.wait()
    reader.join(10)
    log = "".join(lines)
    assert daemon.returncode == 0, log[-3000:]
    assert took < 5, took
    assert "stopped after round" in log
    refused = [line for line in log.splitlines() if "progress report ignored" in line]
    assert any("FIFO" in line and f"{fifo_job}.jsonl" in line for line in refused), log[-3000:]
    assert any("symlink" in line and f"{link_job}.jsonl" in line for line in refused), log[-3000:]
    assert len(refused) == 2                 # once per file, not once per tick
    shadow = [line for line in Path("/etc/shadow").read_text().splitlines() if line.strip()]
    assert not any(s in log for s in shadow)

    # gqueue: the name is escaped, one row per job, in the table and in the JSON
    db = str(tmp_path / "gavel.db")
    assert gqueue(["--db", db]) == 0
    table = capsys.readouterr().out
    assert not any(ch in table for ch in RAW), table
    rows = table.splitlines()
    assert len(rows) == 4 and rows[0].startswith("JOBID")
    mine = next(r for r in rows if r.startswith(named))
    assert printable(EVIL_NAME)[:20] in mine
    assert not any(r.startswith("FAKE") for r in rows)
    assert gqueue(["--db", db, "--json"]) == 0
    text = capsys.readouterr().out
    assert not any(ch in text for ch in RAW)
    data = strict_json(text)                  # an infinite priority is not `Infinity`
    by_id = {j["jobid"]: j for j in data["jobs"]}
    assert by_id[named]["name"] == printable(EVIL_NAME)
    assert not any(s in text or s in table for s in shadow)
    for job in (fifo_job, link_job):
        assert by_id[job]["steps_done"] is not None     # from the spool: only the bad file is lost
    cluster.run(["scancel", fifo_job, link_job, named], check=False)


STALLING_SQUEUE = """#!/bin/bash
# squeue as Slurm ships it, until the test asks it to hang (an unresponsive slurmctld
# on a loaded cluster): then it sleeps, its pid in a file the test kills it by.
if [ -e "$(dirname "$0")/stall" ]; then
  echo $$ > "$(dirname "$0")/stalled.pid"
  exec sleep 600
fi
exec {real} "$@"
"""


def test_a_second_sigterm_ends_a_daemon_stuck_in_a_step(clean, tmp_path):
    """The daemon waits on a squeue that hangs (inside its command timeout): the first
    SIGTERM asks it to stop after the step, the second ends it at once."""
    cluster = clean
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sbatch", "scontrol", "scancel", "sacct", "sinfo", "sprio", "sshare"):
        if shutil.which(tool):
            os.symlink(shutil.which(tool), bin_dir / tool)
    (bin_dir / "squeue").write_text(STALLING_SQUEUE.format(real=shutil.which("squeue")))
    (bin_dir / "squeue").chmod(0o755)
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1,
                          slurm_bin_dir=str(bin_dir), command_timeout_seconds=120)
    submit(cluster, tmp_path, "convnet", 1, 30)
    daemon = start_daemon(config)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(daemon.stdout), daemon=True)
    reader.start()
    stalled = bin_dir / "stalled.pid"
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not any(re.search(r"round 1: ", x) for x in lines):
            time.sleep(0.5)
        assert any(re.search(r"round 1: ", x) for x in lines), "".join(lines)[-3000:]
        (bin_dir / "stall").touch()
        deadline = time.time() + 10
        while time.time() < deadline and not stalled.exists():
            time.sleep(0.2)
        assert stalled.exists()
        time.sleep(0.5)
        daemon.send_signal(signal.SIGTERM)
        time.sleep(2)
        assert daemon.poll() is None             # the step (squeue) still holds it up
        began = time.monotonic()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=20)
        took = time.monotonic() - began
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        if stalled.exists():
            try:
                os.kill(int(stalled.read_text()), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
    reader.join(10)
    log = "".join(lines)
    assert took < 3, took
    assert daemon.returncode == 1
    assert "a second stop signal: exiting now" in log, log[-2000:]
