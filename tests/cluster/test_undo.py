"""`slurm-gavel release-all` on the real local cluster: held gavel jobs run again without the daemon."""
from __future__ import annotations

import json
import re
import subprocess
import sys
import time

from tests.support.slurm import move_job


def _show(cluster, job: str) -> dict[str, str]:
    out = cluster.run(["scontrol", "show", "job", job]).stdout
    fields = {}
    for word in out.split():
        key, sep, value = word.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


def _release_all(cluster, *args):
    env = {"SLURM_CONF": str(cluster.slurm_conf)}
    import os
    return subprocess.run([sys.executable, "-m", "slurm_gavel", "release-all", *args],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=60)


def test_release_all_frees_held_gavel_jobs_and_their_pinned_nodes(slurm_cluster):
    cluster = slurm_cluster
    cluster.run(["scancel", "--user", "root"], check=False)
    submit = ["sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:1"]
    pinned = cluster.run([*submit, "--comment=gavel model=x", "--wrap=sleep 2"]).stdout.strip()
    plain_held = cluster.run([*submit, "--hold", "--wrap=sleep 2"]).stdout.strip()
    try:
        # what the daemon leaves behind: a partition and one node chosen for the job
        move_job(cluster.run, pinned, "p100")
        cluster.run(["scontrol", "update", f"jobid={pinned}", "NodeList=p100-1"])
        assert _show(cluster, pinned)["ReqNodeList"] == "p100-1"
        # and the daemon's word on why it holds the job (its AdminComment after the flags)
        flags = re.search(r"AdminComment=(.*?) *$", cluster.run(["scontrol", "show", "job", pinned]).stdout,
                          re.MULTILINE).group(1)
        cluster.run(["scontrol", "update", f"jobid={pinned}",
                     f"AdminComment={flags} | held by slurm-gavel: waiting for its round"])

        dry = _release_all(cluster, "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        rows = json.loads(dry.stdout)
        assert [r["job"] for r in rows] == [pinned]           # the plain held job is not ours
        assert _show(cluster, pinned)["JobState"] == "PENDING"   # dry run: nothing changed

        done = _release_all(cluster, "--partitions", "v100,p100,k80")
        assert done.returncode == 0, done.stderr
        assert f"{pinned} " in done.stdout and "1 held gavel job(s)" in done.stdout
        job = _show(cluster, pinned)
        assert job["ReqNodeList"] == "(null)" and job["Partition"] in ("v100,p100,k80", "v100", "p100", "k80")
        assert re.search(r"AdminComment=(.*?) *$", cluster.run(["scontrol", "show", "job", pinned]).stdout,
                         re.MULTILINE).group(1) == flags            # no longer held by slurm-gavel
        deadline = time.time() + 60
        while _show(cluster, pinned)["JobState"] not in ("RUNNING", "COMPLETED"):
            assert time.time() < deadline, _show(cluster, pinned)
            time.sleep(0.5)
        assert _show(cluster, plain_held)["Reason"] == "JobHeldUser"   # untouched
        # nothing left to release
        again = _release_all(cluster)
        assert again.returncode == 0 and "0 held gavel job(s)" in again.stdout
    finally:
        cluster.run(["scancel", pinned, plain_held], check=False)
