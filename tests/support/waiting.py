"""Waiting on a cluster: a job's state, any condition, with a timeout."""
from __future__ import annotations

import re
import time


# -- a real cluster ----------------------------------------------------------------
def job_info(cluster, job_id) -> dict:
    out = cluster.run(["scontrol", "-o", "show", "job", job_id]).stdout
    return dict(re.findall(r"(\w+)=(\S*)", out))


def wait_job(cluster, job_id, states, timeout=60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        info = job_info(cluster, job_id)
        if info["JobState"] in states:
            return info
        assert time.monotonic() < deadline, f"job {job_id} not in {states} after {timeout} s: {info}"
        time.sleep(0.2)


def wait_for(predicate, timeout=60, what="condition"):
    """Poll `predicate` until it gives something true, and return that."""
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)
    return value
