"""Multi-GPU pairs' pure parts, on any host (docs/space-sharing.md, "Multi-GPU pairs"): when
the backend may run them (Slurm 23.11+ with both SelectTypeParameters flags, the admin's
max_pair_gpus), where first fit puts a pair of N-GPU halves, the `scontrol update` fields of
a start (a pair's half; a paired job alone again: its own request back, also after a
restart: the SQLite store), the per-poll reading of a running pair, a two-GPU survivor's new
partner (released only where first fit gives it the survivor's GPUs).  Slurm's side is the
recorded queue and nodes of test_start_backoff, replayed with shards; the cluster test is
tests/cluster/test_multi_gpu_pairs.py (24.11.5)."""
from __future__ import annotations

import copy

import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.errors import InputError
from slurm_gavel.core.plan import Assignment, RoundPlan
from slurm_gavel.slurm.backend.pairs import placing as backend_mod
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI
from slurm_gavel.daemon.config import from_dict
from slurm_gavel.slurm.doctor import check_pair_gpus, check_sharing_select
from slurm_gavel.slurm.backend.pairs.multi import (Request, Requests, StoredRequests, allowed_pair_gpus,
                                                   pair_fields, restore_fields)
from slurm_gavel.slurm.backend.pairs.room import NodeRoom, first_fit, pair_gpu, pair_gpus
from slurm_gavel.daemon.store import SqliteStore

from tests.support.replay import ReplayCLI

FLAGS = {"SelectTypeParameters": "CR_Core,MULTIPLE_SHARING_GRES_PJ,ONE_TASK_PER_SHARING_GRES"}
V24 = (24, 11, 5)


def test_multi_gpu_pairs_only_on_23_11_with_both_flags_and_when_asked():
    assert allowed_pair_gpus(1, V24, FLAGS)[0] == 1
    assert allowed_pair_gpus(4, V24, FLAGS) == (4, "pairs of jobs of up to 4 GPUs (Slurm 24.11.5, "
                                                "SelectTypeParameters has MULTIPLE_SHARING_GRES_PJ and "
                                                "ONE_TASK_PER_SHARING_GRES)")
    got, why = allowed_pair_gpus(2, (22, 5, 8), FLAGS)
    assert got == 1 and "23.11" in why and "22.05.8" in why
    got, why = allowed_pair_gpus(2, V24, {"SelectTypeParameters": "CR_Core,MULTIPLE_SHARING_GRES_PJ"})
    assert got == 1 and "ONE_TASK_PER_SHARING_GRES" in why and "MULTIPLE_SHARING_GRES_PJ and" not in why
    assert allowed_pair_gpus(2, V24, {})[0] == 1
    assert allowed_pair_gpus(2, (23, 11), {"SelectTypeParameters": "one_task_per_sharing_gres, "
                                                                   "multiple_sharing_gres_pj"})[0] == 2


def test_the_config_key_is_an_integer_from_1_and_defaults_to_1():
    assert from_dict({}).max_pair_gpus == 1
    assert from_dict({"max_pair_gpus": 2}).max_pair_gpus == 2
    for bad in (0, -1, 2.0, True, "2", 65):
        with pytest.raises(InputError, match="max_pair_gpus"):
            from_dict({"max_pair_gpus": bad})


def test_doctor_says_what_max_pair_gpus_gives_on_this_slurm():
    on = dict(FLAGS, SLURM_VERSION="24.11.5")
    assert check_pair_gpus(on, True, 1) == []
    assert [f["level"] for f in check_pair_gpus(on, True, 2)] == ["info"]
    assert [f["level"] for f in check_pair_gpus(on, False, 2)] == ["warning"]
    old = check_pair_gpus(dict(FLAGS, SLURM_VERSION="22.05.8"), True, 2)
    assert [f["level"] for f in old] == ["warning"] and "23.11" in old[0]["finding"]
    # the flag multi-GPU pairs need is no mistake then, only a risk said
    assert [f["level"] for f in check_sharing_select(on, True, 2)] == ["info"]
    assert [f["level"] for f in check_sharing_select(on, True, 1)] == ["warning"]


def test_first_fit_of_n_gpu_halves_takes_the_first_n_gpus_with_room_for_both():
    assert pair_gpus(NodeRoom([4, 4, 4, 4]), (2, 2), 2) == ((0, 1), "")
    assert pair_gpus(NodeRoom([0, 4, 0, 4]), (2, 2), 2) == ((1, 3), "")
    # a survivor's half on GPU 1: the first half would take GPUs 0,1, the second 0,2
    got, why = pair_gpus(NodeRoom([4, 2, 4, 4], users={1: ["9"]}), (2, 2), 2)
    assert got is None and "GPU 1 has part of its shards in use (job 9)" in why
    got, why = pair_gpus(NodeRoom([0, 4, 4, 0], users={0: ["8"]}, leaving={0}), (2, 2), 2)
    assert got is None and "leaving GPU 0" in why
    assert pair_gpus(NodeRoom([4, 4, 0, 0]), (2, 2), 3)[0] is None
    assert pair_gpus(NodeRoom([4, 4], unseen=["7"]), (2, 2), 2)[0] is None
    # one GPU: as before
    assert pair_gpu(NodeRoom([2, 4]), (2, 2))[0] is None and pair_gpu(NodeRoom([0, 4]), (2, 2)) == (1, "")
    assert first_fit(NodeRoom([1, 3, 4]), 2) == (1, "")


def test_the_update_fields_of_a_pair_half_and_of_its_request_given_back():
    assert pair_fields(2, 2) == {"TresPerNode": "", "TresPerTask": "gres/shard:2", "NumTasks": "2"}
    assert restore_fields(Request(2, 1)) == {"TresPerTask": "", "Gres": "gpu:2", "NumTasks": "1"}
    for bad in ((0, 2), (2, 1)):
        with pytest.raises(ValueError):
            pair_fields(*bad)
    with pytest.raises(ValueError):
        restore_fields(Request(0, 1))


class ArgvCLI(SlurmCLI):
    """The real argument lists, not run."""

    def __init__(self):
        super().__init__()
        self.argv = []

    def run(self, args, check=True, timeout=None, **kw):
        self.argv.append(list(args))


def test_the_commands_are_argument_lists_and_take_only_these_tres_values():
    cli = ArgvCLI()
    cli.update(["6"], Partition="v100", **pair_fields(2, 2))
    cli.update(["6"], **restore_fields(Request(2, 1)))
    assert cli.argv == [["scontrol", "update", "jobid=6", "Partition=v100", "TresPerNode=",
                         "TresPerTask=gres/shard:2", "NumTasks=2"],
                        ["scontrol", "update", "jobid=6", "TresPerTask=", "Gres=gpu:2", "NumTasks=1"]]
    for bad in ({"TresPerTask": "gres/gpu:2"}, {"TresPerTask": "gres/shard:2 Partition=x"},
                {"TresPerNode": "gres/gpu:2"}, {"NumTasks": ""}):
        with pytest.raises(InputError):
            cli.update(["6"], **bad)


class PairReplay(ReplayCLI):
    """Jobs 6 and 7: held `--gres=gpu:2` gavel jobs; a v100 node of 4 GPUs x 4 shards.
    A pair's update is applied as Slurm does (per-task shards, tasks)."""

    def __init__(self):
        super().__init__()
        for n in self.nodes_data["nodes"]:
            if n["name"].startswith("v100"):
                n["gres"] = "gpu:v100:4,shard:v100:16"
        self.jobs = [dict(copy.deepcopy(self.job), job_id=i, tres_per_node="gres:gpu:2", tasks=1)
                     for i in (6, 7)]

    def squeue(self):
        return {"jobs": copy.deepcopy(self.jobs)}

    def update(self, ids, **fields):
        self.actions.append(("update", tuple(ids), tuple(sorted(fields.items()))))
        for j in self.jobs:
            if str(j["job_id"]) in ids:
                if "TresPerTask" in fields:
                    j["tres_per_task"] = fields["TresPerTask"]
                    j["tres_per_node"] = f"gres/{fields['Gres']}" if "Gres" in fields else ""
                    j["tasks"] = int(fields["NumTasks"])

    def release(self, ids):
        self.actions.append(("release", tuple(ids)))


def _backend(cli, requests=None, allow=True):
    backend = SlurmBackend(cli, SimulatedClock(1000.0), partitions={"v100": "v100"},
                           requests=requests)
    if allow:
        assert backend.allow_pair_gpus(2, V24, FLAGS).startswith("pairs of jobs of up to 2 GPUs")
    return backend


def test_a_pair_of_two_gpu_jobs_starts_as_per_task_shards_and_one_alone_gets_its_request_back(
        tmp_path, monkeypatch):
    monkeypatch.setattr(backend_mod, "PAIR_PLACED_SECONDS", 0.3)   # the replay never runs them
    cli = PairReplay()
    store = SqliteStore(tmp_path / "state.db")
    backend = _backend(cli, StoredRequests(store))
    backend.observe()
    pair = Assignment(("6", "7"), "v100", (("v100-0", 2),))
    backend.execute(RoundPlan(0, (pair,), (), (pair,), ()), 1010)
    halves = [a for a in cli.actions if a[0] == "update"]
    assert [a[1] for a in halves] == [("6",), ("7",)]
    for a in halves:
        fields = dict(a[2])
        assert (fields["TresPerNode"], fields["TresPerTask"], fields["NumTasks"]) == ("", "gres/shard:2", "2")
        assert "Gres" not in fields and fields["NodeList"] == "v100-0"
    assert ("release", ("6", "7")) in cli.actions
    assert store.paired_requests() == {"6": (2, 1), "7": (2, 1)}
    # requeued held (as a preempted pair is), then a restarted daemon starts 6 alone
    for j in cli.jobs:
        j.update(job_state="PENDING", state_reason="JobHeldUser", priority=0)
    cli.actions.clear()
    backend = _backend(cli, StoredRequests(store))
    backend.observe()
    lone = Assignment(("6",), "v100", (("v100-0", 2),))
    backend.execute(RoundPlan(1, (lone,), (), (lone,), ()), 1010)
    fields = dict(next(a for a in cli.actions if a[0] == "update")[2])
    assert (fields["TresPerTask"], fields["Gres"], fields["NumTasks"]) == ("", "gpu:2", "1"), fields
    assert ("release", ("6",)) in cli.actions
    assert store.paired_requests() == {"7": (2, 1)}
    # paired again (6 held once more, 7 never restored): 7 keeps what it asked first, not
    # its per-task request of now
    cli.jobs[0].update(job_state="PENDING", state_reason="JobHeldUser", priority=0)
    backend.clock.sleep_until(1005)
    backend.observe()
    cli.actions.clear()
    backend.execute(RoundPlan(2, (pair,), (), (pair,), ()), 1020)
    assert ("release", ("6", "7")) in cli.actions, cli.actions
    assert store.paired_requests() == {"6": (2, 1), "7": (2, 1)}
    store.close()


def test_without_the_slurm_flags_a_two_gpu_pair_is_refused_and_nothing_changes():
    cli = PairReplay()
    events = []
    backend = SlurmBackend(cli, SimulatedClock(1000.0), partitions={"v100": "v100"},
                           on_event=lambda kind, job, text: events.append((kind, job, text)))
    assert backend.allow_pair_gpus(2, (22, 5, 8), FLAGS).startswith("pairs of one-GPU jobs only")
    assert backend.max_pair_gpus == 1
    backend.observe()
    pair = Assignment(("6", "7"), "v100", (("v100-0", 2),))
    backend.execute(RoundPlan(0, (pair,), (), (pair,), ()), 1010)
    assert cli.actions == []
    assert [e[0] for e in events if e[0] == "pair_refused"] == ["pair_refused"] * 2
    assert "only pairs of one-GPU jobs" in events[-1][2]


def test_a_distributed_job_is_not_paired(monkeypatch):
    cli = PairReplay()
    cli.jobs[1].update(tres_per_node="", tres_per_job="gres:gpu:2")       # --gpus=2
    backend = _backend(cli)
    backend.observe()
    assert "job 7 does not ask 2 GPUs" in backend._pair_problem(Assignment(("6", "7"), "v100",
                                                                          (("v100-0", 2),)))


def test_a_running_two_gpu_pair_is_read_as_its_row_and_a_third_job_on_its_gpus_is_reported():
    cli = PairReplay()
    running = dict(job_state="RUNNING", nodes="v100-0", tres_per_node="", tres_per_task="gres/shard:2",
                   tasks=2, gres_detail=["shard:4(2/4,2/4,0/4,0/4)"], state_reason="None", priority=1)
    cli.jobs = [dict(j, **running) for j in cli.jobs]
    events = []
    backend = SlurmBackend(cli, SimulatedClock(1000.0), partitions={"v100": "v100"},
                           on_event=lambda kind, job, text: events.append((kind, job, text)))
    obs = backend.observe()         # a restarted daemon: the two halves are a pair of 2 GPUs
    assert [(r.jobs, r.servers) for r in obs.running] == [(("6", "7"), (("v100-0", 2),))]
    assert not [e for e in events if e[0] == "gpu_shared"]
    other = dict(copy.deepcopy(cli.jobs[0]), job_id=9, admin_comment="", tres_per_task="",
                 tres_per_node="gres:gpu:1", tasks=1, gres_detail=["gpu:v100:1(IDX:1)"])
    cli.jobs.append(other)
    backend.clock.sleep_until(1001)
    backend.observe()
    shared = [e for e in events if e[0] == "gpu_shared"]
    assert shared and "shares GPU v100-0:0,1 with job 9" in shared[0][2], events


def test_requests_in_memory_and_in_the_store_survive_what_they_should(tmp_path):
    r = Requests()
    r.put("5", Request(2, 1))
    assert r.get("5") == Request(2, 1)
    r.forget("5")
    r.forget("5")
    assert r.get("5") is None
    store = SqliteStore(tmp_path / "s.db")
    StoredRequests(store).put("5", Request(4, 3))
    assert StoredRequests(store).get("5") == Request(4, 3)       # a restart reads it back
    StoredRequests(store).forget("5")
    assert StoredRequests(store).get("5") is None
    store.close()


class _Stub:
    """What Daemon._check_space_sharing uses: the Slurm commands and the backend."""

    def __init__(self, version, conf):
        self.cli = type("CLI", (), {"version": lambda s: version, "config": lambda s: conf})()
        self.backend = SlurmBackend(PairReplay(), SimulatedClock(1000.0), partitions={"v100": "v100"})


@pytest.mark.parametrize("version, conf, sharing, wanted, level, said, got", [
    (V24, FLAGS, True, 2, "INFO", "space sharing: on, pairs of jobs of up to 2 GPUs", 2),
    ((22, 5, 8), FLAGS, True, 2, "WARNING", "needs Slurm 23.11+", 1),
    (V24, {}, True, 2, "WARNING", "needs SelectTypeParameters with MULTIPLE_SHARING_GRES_PJ and "
                                  "ONE_TASK_PER_SHARING_GRES", 1),
    (V24, FLAGS, False, 2, "WARNING", "max_pair_gpus = 2 has no effect", 1),
])
def test_the_daemon_says_at_start_which_pairs_it_runs_and_why(caplog, version, conf, sharing, wanted,
                                                             level, said, got):
    from slurm_gavel.daemon.daemon import Daemon
    stub = _Stub(version, conf)
    config = from_dict({"space_sharing": sharing, "max_pair_gpus": wanted})
    with caplog.at_level("INFO", logger="slurm_gavel"):
        stub._allow_pair_gpus = lambda w, v: Daemon._allow_pair_gpus(stub, w, v)
        Daemon._check_space_sharing(stub, config)
    lines = [r for r in caplog.records if said in r.getMessage()]
    assert [r.levelname for r in lines] == [level], caplog.text
    assert stub.backend.max_pair_gpus == got


class SurvivorReplay(PairReplay):
    """Job 5 the survivor of a two-GPU pair, running alone on half of the shards of `gpus`
    (per-task shards, a task per GPU); 6 and 7 held `--gres=gpu:2` jobs.  A released job
    runs where `placed` says (Slurm's first fit, as the test expects it)."""

    def __init__(self, gpus):
        super().__init__()
        detail = ",".join("2/4" if i in gpus else "0/4" for i in range(4))
        survivor = dict(copy.deepcopy(self.jobs[0]), job_id=5, job_state="RUNNING", nodes="v100-0",
                        tres_per_node="", tres_per_task="gres/shard:2", tasks=2,
                        gres_detail=[f"shard:4({detail})"], state_reason="None", priority=1)
        self.jobs.insert(0, survivor)
        self.placed: dict[str, str] = {}

    def signal(self, ids, *args, **kw):
        self.actions.append(("signal", tuple(ids)))

    def release(self, ids):
        super().release(ids)
        for j in self.jobs:
            if str(j["job_id"]) in ids and str(j["job_id"]) in self.placed:
                j.update(job_state="RUNNING", state_reason="None", priority=1,
                         gres_detail=[self.placed[str(j["job_id"])]])


def _survivor_backend(cli, events):
    requests = Requests()
    requests.put("5", Request(2, 1))             # its pair's start remembered what it asked
    backend = SlurmBackend(cli, SimulatedClock(1000.0), partitions={"v100": "v100"}, requests=requests,
                           on_event=lambda kind, job, text: events.append((kind, job, text)))
    assert backend.allow_pair_gpus(2, V24, FLAGS).startswith("pairs of jobs of up to 2 GPUs")
    obs = backend.observe()
    assert [r.jobs for r in obs.running] == [("5",)]
    return backend


def test_a_two_gpu_survivor_is_joined_on_its_gpus_not_preempted_and_both_are_the_pair_row(monkeypatch):
    monkeypatch.setattr(backend_mod, "PAIR_PLACED_SECONDS", 0.3)
    cli = SurvivorReplay({0, 1})
    cli.placed["6"] = "shard:4(2/4,2/4,0/4,0/4)"
    events = []
    backend = _survivor_backend(cli, events)
    row = Assignment(("5", "6"), "v100", (("v100-0", 2),))
    backend.execute(RoundPlan(1, (row,), (), (row,), ("5",)), 1010)
    assert not [a for a in cli.actions if a[0] == "signal"], cli.actions      # the survivor runs on
    updates = [a for a in cli.actions if a[0] == "update"]
    assert [a[1] for a in updates] == [("6",)]
    fields = dict(updates[0][2])
    assert (fields["TresPerNode"], fields["TresPerTask"], fields["NumTasks"]) == ("", "gres/shard:2", "2")
    assert ("release", ("6",)) in cli.actions
    assert backend.requests.get("6") == Request(2, 1)                     # saved before its update
    backend.clock.sleep_until(1001)
    obs = backend.observe()
    assert [(r.jobs, r.servers) for r in obs.running] == [(("5", "6"), (("v100-0", 2),))]
    assert not [e for e in events if e[0] in ("gpu_shared", "pair_refused")], events


def test_a_two_gpu_survivors_partner_waits_while_first_fit_would_give_it_other_gpus_said_once(monkeypatch):
    """Survivor on GPUs 2,3 with 0,1 free: a task per GPU, the partner would take 0,1.  It
    waits (said once, over polls) until other jobs fill GPUs 0,1, then joins on 2,3."""
    monkeypatch.setattr(backend_mod, "PAIR_PLACED_SECONDS", 0.3)
    cli = SurvivorReplay({2, 3})
    cli.placed["6"] = "shard:4(0/4,0/4,2/4,2/4)"
    events = []
    backend = _survivor_backend(cli, events)
    row = Assignment(("5", "6"), "v100", (("v100-0", 2),))
    backend.execute(RoundPlan(1, (row,), (), (row,), ("5",)), 1010)
    for t in (1001, 1002):
        backend.clock.sleep_until(t)
        backend.observe()
    assert [a[0] for a in cli.actions] == [], cli.actions                   # no signal, no start
    said = [e[2] for e in events if e[0] == "pair_refused"]
    assert said == ["node v100-0: first fit would give job 6 GPUs 0,1, not GPUs 2,3 beside job 5; "
                    "it waits"] * 2, said                                  # (one event per job of the row)
    # another user's two-GPU job takes GPUs 0,1: first fit now gives the partner 2,3
    cli.jobs.append(dict(copy.deepcopy(cli.jobs[1]), job_id=9, admin_comment="", job_state="RUNNING",
                         nodes="v100-0", tres_per_node="gres:gpu:2", gres_detail=["gpu:v100:2(IDX:0-1)"],
                         state_reason="None", priority=1))
    backend.clock.sleep_until(1003)
    backend.observe()
    assert ("release", ("6",)) in cli.actions and not [a for a in cli.actions if a[0] == "signal"]
    backend.clock.sleep_until(1004)
    assert [r.jobs for r in backend.observe().running if len(r.jobs) > 1] == [("5", "6")]


def test_first_fit_of_a_survivors_partner_takes_the_first_gpus_with_room_it_does_not_use_yet():
    from slurm_gavel.slurm.backend.pairs.room import first_fit_gpus
    assert first_fit_gpus(NodeRoom([2, 2, 4, 4]), 2, 2) == ((0, 1), "")     # beside a survivor on 0,1
    assert first_fit_gpus(NodeRoom([4, 2, 4, 2]), 2, 2) == ((0, 1), "")     # survivor on 1,3: not its GPUs
    assert first_fit_gpus(NodeRoom([0, 2, 0, 2]), 2, 2) == ((1, 3), "")
    got, why = first_fit_gpus(NodeRoom([0, 2, 4, 2], users={0: ["8"]}, leaving={0}), 2, 2)
    assert got is None and "leaving GPU 0" in why                          # 8 may free GPU 0 first
