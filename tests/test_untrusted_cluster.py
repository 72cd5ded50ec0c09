"""Users cannot stall, crash or fool the daemon, on the real local Slurm cluster:
a FIFO and a symlink to /etc/shadow as progress files, a job name full of terminal
escapes -- rounds go on, SIGTERM stops the daemon at once, gqueue prints it all escaped."""
from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path

from slurm_gavel.core.display import printable
from slurm_gavel.slurm.queue import main as gqueue

from test_daemon import clean, start_daemon, stop_daemon, submit, write_config  # noqa: F401
from test_queue import strict_json

EVIL_NAME = "x\x1b]0;owned\x07\x1b[31mred\nFAKE 1 root R\u202eabc\rz"
RAW = ("\x1b", "\x07", "\u202e", "\r")


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
        while time.time() < deadline and sum(bool(re.search(r"round \d+: ", x)) for x in lines) < 4:
            time.sleep(0.5)
        assert sum(bool(re.search(r"round \d+: ", x)) for x in lines) >= 4, "".join(lines)[-3000:]
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
