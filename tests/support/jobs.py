"""Jobs submitted to the session cluster as root or as another user, read back and cancelled at the
end."""
from __future__ import annotations

import json
import os
import re
import stat
import time
from pathlib import Path

import pytest


USER = "gavel-jstest"          # created for these tests when missing, removed afterwards


# -- helpers ---------------------------------------------------------------------
def _state(job: dict) -> str:
    s = job.get("job_state")
    return s[0] if isinstance(s, list) else s        # 23.02+: a list of flags


def _cluster_dir(cluster) -> Path:
    return Path(getattr(cluster, "dir", None) or cluster.directory)


class Jobs:
    """Submits jobs (as root or as USER), reads them back, cancels them all at the end."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.ids: list[str] = []

    def run(self, args, user=None, check=True):
        if user is not None:
            traversable(_cluster_dir(self.cluster))
            args = ["runuser", "-u", user, "--", *args]
        return self.cluster.run(args, check=check, cwd="/tmp")

    def sbatch(self, *opts, user=None, check=True, script="sleep 300"):
        r = self.run(["sbatch", "--parsable", "--output=/dev/null", "--chdir=/tmp", *opts,
                      f"--wrap={script}"], user=user, check=check)
        if r.returncode == 0:
            self.ids.append(r.stdout.strip().split(";")[0])
        return r

    def info(self, job_id: str) -> dict:
        out = self.cluster.run(["squeue", "--json", "--states=all", "--jobs", job_id]).stdout
        for job in json.loads(out)["jobs"]:
            if str(job.get("job_id")) == str(job_id):
                return job
        raise AssertionError(f"job {job_id} not in squeue --json")

    def wait(self, job_id: str, states, timeout=60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.info(job_id)
            if _state(job) in states:
                return job
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id}: {_state(job)} after {timeout} s, "
                                     f"expected {states}")
            time.sleep(0.3)

    def cancel_all(self):
        if self.ids:
            self.cluster.run(["scancel", *self.ids], check=False)


_MODES: dict[Path, int] = {}


def traversable(directory: Path):
    """Let other users reach the cluster's slurm.conf and munge socket.

    The session cluster lives under pytest's private temp root (mode 0700), which
    a non-root user cannot traverse. Add o+x (traversal only, no listing) to
    each private ancestor; `restore_modes` undoes it. Called before every
    command run as USER because a pytest session started meanwhile re-tightens
    its temp root.
    """
    for d in [directory, *directory.parents]:
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            _MODES.setdefault(d, stat.S_IMODE(mode))
            os.chmod(d, stat.S_IMODE(mode) | stat.S_IXOTH)


def restore_modes():
    for d, mode in _MODES.items():
        try:
            os.chmod(d, mode)
        except FileNotFoundError:
            pass
    _MODES.clear()
