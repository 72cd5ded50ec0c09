"""A held gavel job says in Slurm that slurm-gavel holds it and why (its AdminComment, which
every user reads in `scontrol show job`), on the real local cluster: written in one
`scontrol update` for jobs sharing a text, gone once the daemon starts the job; the flags
still read."""
from __future__ import annotations

import re
import subprocess
import time

from tests.support.daemon import start_daemon, stop_daemon, submit, write_config
from tests.support.jobs import restore_modes, traversable


def show(cluster, job: str, user: str | None = None) -> dict[str, str]:
    args = ["scontrol", "show", "job", job]
    if user:                # through the private temp root to slurm.conf (o+x, undone)
        traversable(cluster.directory)
        args = ["runuser", "-u", user, "--", *args]
    out = subprocess.run(args, env=cluster.env, capture_output=True, text=True, timeout=30).stdout
    fields = {}
    for line in out.splitlines():
        for key in ("AdminComment", "JobState", "Reason"):
            m = re.search(rf"\b{key}=(.*?)(?= [A-Z][A-Za-z]*=|$)", line.strip())
            if m:
                fields[key] = m.group(1).strip()
    return fields


def test_held_jobs_say_why_and_lose_it_when_started(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    first = submit(cluster, tmp_path, "convnet", 1, 30)
    later = [submit(cluster, tmp_path, "convnet", 1, 3, extra=(f"--dependency=afterok:{first}",))
             for _ in range(2)]
    flags = {job: show(cluster, job)["AdminComment"] for job in later}     # the plugin's
    assert all(f.startswith("gavel:v1 ") and "|" not in f for f in flags.values()), flags
    daemon = start_daemon(config)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            seen = {job: show(cluster, job) for job in later}
            if all("held by slurm-gavel" in s.get("AdminComment", "") for s in seen.values()):
                break
            time.sleep(1)
        for job in later:
            s = show(cluster, job)
            assert s["JobState"] == "PENDING" and s["Reason"] == "JobHeldUser", s
            assert s["AdminComment"] == (f"{flags[job]} | held by slurm-gavel: "
                                         f"waiting for its dependency (afterok:{first}(unfulfilled))"), s
            # another user reads it too
            try:
                assert show(cluster, job, user="nobody")["AdminComment"] == s["AdminComment"]
            finally:
                restore_modes()
        # the dependency dropped (Slurm takes up to a minute to see a held job's dependency
        # met): both are started, the status is gone, the flags stay
        for job in later:
            cluster.run(["scontrol", "update", f"jobid={job}", "Dependency="])
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            states = {job: show(cluster, job) for job in later}
            if all(s.get("JobState") in ("RUNNING", "COMPLETED", "COMPLETING") for s in states.values()):
                break
            time.sleep(1)
        for job, s in states.items():
            assert s["JobState"] in ("RUNNING", "COMPLETED", "COMPLETING"), (job, s)
            assert s["AdminComment"] == flags[job], s
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log
    # one call for the two jobs sharing a text (a list of ids), never one per job per round
    marks = [line for line in log.splitlines() if "show why held" in line and "dry run" not in line]
    assert len(marks) == 1 and f": {','.join(later)} -- job {later[0]} on partition " in marks[0], log
