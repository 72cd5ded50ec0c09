"""A start Slurm refuses is not asked again every round (issue 13 §1): the backend learns it.

On a private real cluster (k80: 2 nodes x 2 GPUs, v100: 1 node x 4 GPUs; private
because the case deletes a node, `scontrol delete nodename=`, which works on 22.05 for
a static node too): the daemon's view is a poll old when the node goes, so the plan
still names it and `scontrol update ... NodeList=k80-0,k80-1` answers "Invalid node
name specified".  The next observation leaves the refused shape's nodes out of the
job's placement for a backoff that doubles with each refusal of the same shape: the
real mechanism then plans another shape (1x4 on v100), which Slurm runs; a job that
no other node can hold waits with the reason, which gqueue's status shows.
"""
from __future__ import annotations

import time

import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.core.mechanism import place
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.devcluster import slurm_version

from slurm_gavel.devcluster import default_job_submit_lua
from tests.support.slurm import require_slurm, running_cluster

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

TYPES = {"k80": (2, 2), "v100": (1, 4)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("refused"), TYPES,
                         job_submit_lua=default_job_submit_lua()) as c:
        yield c


def _submit(cluster, tmp_path, *request) -> str:
    out = cluster.run(["sbatch", "--parsable", "-o", str(tmp_path / "out-%j.txt"),
                       "--comment", "gavel model=convnet", *request, "--wrap", "sleep 300"]).stdout
    return out.strip().split(";")[0]


def _state(obs, job):
    return next(s for s in obs.jobs if s.id == job)


def _remove_node(cluster, node) -> str:
    """Take `node` out of Slurm; the name a stale plan then holds for it.  22.05 deletes a
    static node (`scontrol delete`); 24.11 deletes only dynamic ones ("Invalid node state
    specified", verified) and accepts a FUTURE node in a job's NodeList, so there the node
    leaves the view as FUTURE and the stale plan names one Slurm never had: both answered
    "Invalid node name specified"."""
    if slurm_version() < (23, 2):
        cluster.run(["scontrol", "delete", f"nodename={node}"])
        return node
    cluster.run(["scontrol", "update", f"nodename={node}", "state=future"])
    return node + "-gone"


def _plan(number, *starts):
    return RoundPlan(number, assignments=starts, keep=(), start=starts, preempt=())


def _squeue(cluster, job, fmt):
    return cluster.run(["squeue", "-h", "-j", job, "-o", fmt]).stdout.strip()


def test_a_refused_shape_is_avoided_with_backoff_and_another_shape_runs(cluster, tmp_path):
    from slurm_gavel.slurm.backend import SlurmBackend
    from slurm_gavel.slurm.commands import SlurmCLI
    events = []
    backend = SlurmBackend(SlurmCLI(env=cluster.env), WallClock(), grace_seconds=10.0,
                           on_event=lambda kind, job, detail: events.append((kind, job, detail)))
    wide = _submit(cluster, tmp_path, "--gpus=4")
    small = _submit(cluster, tmp_path, "--gpus=2", "-x", "v100-0")     # k80 only
    obs = backend.observe()
    assert {s.name for s in obs.servers} == {"k80-0", "k80-1", "v100-0"}
    assert _state(obs, wide).hold_reason == "" and _state(obs, small).hold_reason == ""
    # the node goes between the poll and the plan's start
    gone = _remove_node(cluster, "k80-1")
    stale = _plan(0, Assignment((wide,), "k80", (("k80-0", 2), (gone, 2))),
                  Assignment((small,), "k80", (("k80-0", 1), (gone, 1))))
    backend.execute(stale, round_end=time.time() + 2.0)            # a 2 s round: 2 s backoff
    refused = [(job, detail) for kind, job, detail in events if kind == "refused"]
    assert sorted(job for job, _ in refused) == sorted([wide, small]), events
    assert all("Invalid node name" in detail for _, detail in refused), refused
    assert _squeue(cluster, wide, "%T %r") == "PENDING JobHeldUser"       # not released

    obs = backend.observe()
    w = _state(obs, wide)
    # k80 cannot hold 4 GPUs without its refused nodes; v100-0 can: planned elsewhere
    assert w.hold_reason == "" and w.placement.servers == frozenset({"v100-0"}), w.placement
    status = backend.job_status()
    assert status[wide]["state"] == "PD"
    assert f"Slurm refused to start it on k80 k80-0,{gone} (2x2 GPUs)" in status[wide]["detail"]
    assert "planned elsewhere" in status[wide]["detail"]
    # the other job may only run on k80: it waits, and says why
    s = _state(obs, small)
    assert s.hold_reason.startswith(f"Slurm refused to start it on k80 k80-0,{gone} (2x1 GPUs): "
                                    "Invalid node name"), s.hold_reason
    assert status[small] == {"state": "W", "gpus": 0, "detail": s.hold_reason}
    # the real mechanism, given the new placement, plans the wide job 1x4 on v100
    placements = {st.id: st.placement for st in obs.jobs}
    with pytest.raises(ValueError):
        place([((wide,), "k80", 4)], obs.servers, {}, placements)
    [a] = place([((wide,), "v100", 4)], obs.servers, {}, placements)
    assert a.servers == (("v100-0", 4),)
    backend.execute(_plan(1, a), round_end=time.time() + 2.0)
    deadline = time.time() + 20
    while _squeue(cluster, wide, "%T") != "RUNNING":
        assert time.time() < deadline, _squeue(cluster, wide, "%T %r")
        time.sleep(0.3)
        backend.observe()
    assert _squeue(cluster, wide, "%P %D %N %b") in ("v100 1 v100-0 gres:gpu:4", "v100 1 v100-0 gres/gpu:4")

    # after its backoff (one 2 s round) the small job may ask for k80-0 again; a second
    # refusal of the same shape backs off twice as long
    time.sleep(2.2)
    s = _state(backend.observe(), small)
    assert s.hold_reason == "" and "k80-0" in s.placement.servers, (s.hold_reason, s.placement)
    events.clear()
    backend.execute(_plan(2, stale.start[1]), round_end=time.time() + 2.0)
    assert [d for k, j, d in events if k == "refused" and j == small][0].endswith("avoided for 4 s")
    s = _state(backend.observe(), small)
    assert "not asked again for 2 rounds" in s.hold_reason, s.hold_reason
    cluster.run(["scancel", wide, small])
