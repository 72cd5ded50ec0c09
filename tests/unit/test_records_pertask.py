"""Jobs that ask GPUs or shards per task (`-n 2 --tres-per-task=gres/shard:2`,
`--gpus-per-task=1 -n 4`), read from squeue as Slurm printed them.

tests/fixtures/squeue-pertask-24.11.json (24.11.5, SelectTypeParameters
MULTIPLE_SHARING_GRES_PJ,ONE_TASK_PER_SHARING_GRES, one node of 4 GPUs x 4 shards) and
-22.05.json (22.05.8: no --tres-per-task, only --gpus-per-task) were recorded by
tests/fixtures/record-pertask.py: three polls each, the jobs named for their request.
Such a job asks nothing in `tres_per_node`; 24.11 lists its request in `tres_per_task`
(`gres/shard:2`, `gres/gpu:1`, `--gpus-per-task` spelled `gres/gpu=1`) and its task count
in `tasks`, and, running, what it holds in `gres_detail` (`shard:4(2/4,2/4,0/4,0/4)`).
No host needs Slurm for these.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.backend.pairs.room import first_fit, gpu_room
from slurm_gavel.slurm.records import parse_jobs, parse_nodes

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def polls(version: str) -> list[dict]:
    return json.loads((FIXTURES / f"squeue-pertask-{version}.json").read_text())["polls"]


def by_name(poll: dict):
    return {j.name: j for j in parse_jobs(poll["squeue"])}


def room_of(poll: dict):
    nodes = parse_nodes(poll["nodes"])
    per = {n.name: n.shards // n.gpus for n in nodes}
    return gpu_room(parse_jobs(poll["squeue"]), {n.name: n.gpus for n in nodes}, per.get,
                    lambda j: False)["v100-0"]


def test_a_running_per_task_shard_job_holds_its_shards_on_the_gpus_gres_detail_lists():
    jobs = by_name(polls("24.11")[0])
    j = jobs["pt-shard-run"]                      # -n2 --tres-per-task=gres/shard:2: GPUs 0 and 1
    assert (j.shards, j.gpus, j.gpu_indices, j.gpus_on("v100-0")) == (4, 2, ("0,1",), 2)
    assert j.gpu_shards == (((0, 2), (1, 2)),)
    g = jobs["pt-gpu-run"]                        # -n2 --gpus-per-task=1: GPUs 2 and 3 whole
    assert (g.shards, g.gpus, g.gpu_indices, g.gpus_on("v100-0")) == (0, 2, ("2-3",), 2)
    assert g.gpu_shards == (((2, None), (3, None)),)
    later = by_name(polls("24.11")[1])
    m = later["pt-shard-multi-run"]               # --gres-flags=multiple-tasks-per-sharing: one GPU
    assert (m.shards, m.gpus, m.gpu_indices, m.gpus_on("v100-0")) == (4, 1, ("0",), 1)
    t = later["pt-tresgpu-run"]                   # -n2 --tres-per-task=gres/gpu:1
    assert (t.gpus, t.gpu_indices, t.gpus_on("v100-0")) == (2, ("1-2",), 2)


def test_a_pending_per_task_job_asks_its_count_times_its_tasks_one_gpu_per_shard_task():
    jobs = by_name(polls("24.11")[0])
    seen = {name: (j.shards, j.gpus, j.total_gpus) for name, j in jobs.items() if not j.running}
    assert seen == {"pt-shard-held": (4, 2, 2),          # -n2 shard:2
                    "pt-shard3-held": (3, 3, 3),         # -n3 shard:1
                    "pt-tresgpu4-held": (0, 4, 4),       # -n4 --tres-per-task=gres/gpu:1
                    "pt-gpu4-held": (0, 4, 4),           # -n4 --gpus-per-task=1
                    "pt-shard-multi-held": (4, 2, 2)}    # the flag is not in squeue: one per task
    later = by_name(polls("24.11")[1])
    assert (later["pt-shard1-wait"].shards, later["pt-shard1-wait"].gpus) == (2, 2)
    assert (later["node-shard-wait"].shards, later["node-shard-wait"].gpus) == (1, 1)   # per node: as before
    assert (by_name(polls("24.11")[2])["pt-shard3x4-wait"].shards,
            by_name(polls("24.11")[2])["pt-shard3x4-wait"].gpus) == (12, 4)


def test_22_05_gpus_per_task_pending_and_running():
    jobs = by_name(polls("22.05")[0])
    assert (jobs["pt-gpu-run"].gpus, jobs["pt-gpu-run"].gpu_indices) == (2, ("0-1",))
    assert (jobs["pt-gpu4-held"].gpus, jobs["pt-gpu4-held"].total_gpus) == (4, 4)
    assert polls("22.05")[0]["refused"]["pt-shard-run"].startswith("sbatch: unrecognized option")
    shard = by_name(polls("22.05")[1])["node-shard-wait"]         # 22.05's IDX form
    assert (shard.shards, shard.gpus, shard.gpu_indices, shard.gpu_shards) == (1, 1, ("0",), (((0, 1),),))


def test_the_free_shards_per_gpu_are_what_slurm_lists_as_used():
    """gpu_room from each 24.11 poll matches the node's own `gres_used`
    (`shard:v100:4(2/4,2/4,0/4,0/4)` beside `gpu:v100:2(IDX:2-3)` in the first)."""
    p1, p2, p3 = polls("24.11")
    assert p1["nodes"]["nodes"][0]["gres_used"] == "gpu:v100:2(IDX:2-3),shard:v100:4(2/4,2/4,0/4,0/4)"
    r = room_of(p1)
    assert r.free == [2, 2, 0, 0] and not r.unseen
    assert {i: sorted(u) for i, u in r.users.items()} == {0: ["1"], 1: ["1"], 2: ["2"], 3: ["2"]}
    assert first_fit(r, 2) == (0, "") and first_fit(r, 4)[0] is None
    assert room_of(p2).free == [0, 0, 0, 4]
    assert room_of(p3).free == [0, 4, 4, 4]


class PollCLI:
    """The backend's Slurm side: one recorded poll, nothing else runs."""

    def __init__(self, poll):
        self.poll = poll
        self.actions = []

    def squeue(self):
        return copy.deepcopy(self.poll["squeue"])

    def nodes(self):
        return copy.deepcopy(self.poll["nodes"])

    def update(self, ids, **fields):
        self.actions.append(("update", tuple(ids)))

    def release(self, ids):
        self.actions.append(("release", tuple(ids)))

    def hold(self, ids):
        self.actions.append(("hold", tuple(ids)))


@pytest.mark.parametrize("poll, free", [(0, 0), (1, 1), (2, 3)])
def test_the_backend_counts_the_gpus_other_users_per_task_jobs_hold(poll, free):
    """Set 1: a per-task shard job on GPUs 0,1 and a --gpus-per-task job on 2,3 leave the
    plan no GPU of v100-0 (it offered 2, counting the shard job as none); set 2: 1 + 2
    GPUs held, 1 free; set 3: one whole GPU."""
    cli = PollCLI(polls("24.11")[poll])
    backend = SlurmBackend(cli, SimulatedClock(1000.0), partitions={"v100": "v100"})
    obs = backend.observe()
    assert sum(s.gpus for s in obs.servers if s.name == "v100-0") == free
    assert backend._others_gpus.get("v100-0", 0) == 4 - free


def _job(**fields):
    base = {"job_id": 5, "job_state": ["RUNNING"], "nodes": "v100-0", "node_count": 1,
            "tres_per_node": "", "tres_per_task": "gres/shard:2", "tasks": 2}
    base.update(fields)
    return parse_jobs({"jobs": [base]})[0]


@pytest.mark.parametrize("fields", [
    {"gres_detail": ["shard:4(2/4,junk)"]}, {"gres_detail": ["shard:4(IDX:N/A)"]},
    {"gres_detail": [None]}, {"gres_detail": "shard:4(2/4)"}, {"gres_detail": [{"x": 1}]},
    {"gres_detail": ["shard:4(IDX:0-99999999999999)"]}, {"gres_detail": ["shard:x(1/4)"]},
    {"tasks": {"infinite": True}}, {"tasks": "nan"}, {"tasks": -3}, {"tasks": True},
    {"tasks": 1e30}, {"tasks_per_node": {"number": 10 ** 40}},
    {"tres_per_task": 7, "gres_detail": ["shard:4(2/4,2/4,0/4,0/4)"]},
    {"node_count": {"set": True, "infinite": True}}, {"node_count": "nan"},
    {"tres_per_task": "gres/shard:99999999999999999999"}, {"restart_cnt": {"infinite": True}},
    {"exit_code": {"return_code": {"infinite": True}}}, {"exit_code": "nan"},
])
def test_malformed_per_task_fields_do_not_raise_and_never_read_as_free(fields):
    """What squeue prints of other users' jobs is not trusted: a bad value reads as occupying
    (a running job whose GPUs are not listed blocks first fit on its node), never as free."""
    j = _job(**fields)
    assert j.running and j.gpus_on("v100-0") >= 1
    r = gpu_room([j], {"v100-0": 4}, lambda n: 4, lambda j: False)["v100-0"]
    listed = [i for i, free in enumerate(r.free) if free < 4]
    assert listed or r.unseen, (j, r)
    assert len(r.free) == 4


def test_a_running_gpu_job_listed_without_its_gpus_blocks_first_fit_on_its_node():
    """A whole-GPU job (completing, gres_detail empty) holds a GPU the poll cannot place."""
    j = parse_jobs({"jobs": [{"job_id": 9, "job_state": ["COMPLETING"], "nodes": "v100-0",
                              "tres_per_node": "gres/gpu:1", "gres_detail": []}]})[0]
    r = gpu_room([j], {"v100-0": 4}, lambda n: 4, lambda j: False)["v100-0"]
    assert r.unseen == ["9"] and first_fit(r, 2)[0] is None


def test_gres_detail_forms_read_into_gpus_and_shards_per_gpu():
    """22.05's IDX form over two GPUs does not say the split: each GPU counts all of them;
    a job holding a whole GPU and shards of another lists both."""
    def one(detail, **fields):
        base = {"job_id": 1, "job_state": "RUNNING", "nodes": "n", "node_count": 1, "gres_detail": [detail]}
        return parse_jobs({"jobs": [dict(base, **fields)]})[0]
    j = one("shard:4(IDX:0-1)", tres_per_node="gres:shard:4")
    assert (j.gpu_indices, j.gpu_shards, j.gpus_on("n"), j.shards) == (("0-1",), (((0, 4), (1, 4)),), 2, 4)
    j = one("gpu:v100:1(IDX:0),shard:2(0/4,2/4)", tres_per_node="gres/gpu:1,gres/shard:2")
    assert (j.gpu_indices, j.gpu_shards, j.gpus_on("n")) == (("0,1",), (((0, None), (1, 2)),), 2)
    j = one("gpu:v100:2(IDX:N/A)", tres_per_node="gres/gpu:2")
    assert (j.gpu_indices, j.gpu_shards, j.gpus_on("n")) == (("",), ((),), 2)
