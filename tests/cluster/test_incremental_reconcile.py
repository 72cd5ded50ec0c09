"""The poll's reconcile is incremental on the real local cluster (issue 25): a job record whose
fields did not change since the last poll is not parsed again (`SlurmBackend.reconciled`
counts those that were), yet every change is seen at the next poll: a job that ends, one
cancelled, one requeued, a changed AdminComment (flags) and a new arrival.  A poll's Slurm
commands (counted by the backend's `SlurmCLI`) and slurmctld's RPCs (sdiag) are the same
with 4 queued jobs and with 40."""
from __future__ import annotations


import pytest

from slurm_gavel.core.clock import WallClock
from slurm_gavel.slurm.backend import SlurmBackend
from slurm_gavel.slurm.commands import SlurmCLI
from tests.support.waiting import wait_for, wait_job

GAVEL = ("--comment", "gavel model=convnet", "--gres=gpu:1")
# RPCs slurmctld gets whatever the daemon does (nodes registering, sdiag itself)
BACKGROUND = ("MESSAGE_NODE_REGISTRATION_STATUS", "REQUEST_STATS_INFO", "MESSAGE_EPILOG_COMPLETE",
              "REQUEST_COMPLETE_PROLOG")


def rpcs(cluster) -> dict[str, int]:
    """slurmctld's RPCs so far by message type (sdiag's statistics by message type)."""
    return {name: count for name, (count, _) in cluster.rpcs().items()}


@pytest.fixture
def cluster(slurm_cluster):
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)


def sbatch(cluster, tmp_path, *args) -> str:
    out = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", *args], cwd=tmp_path).stdout
    return out.strip().split(";")[0]


def quiet_poll(backend: SlurmBackend) -> int:
    """Poll until two polls in a row see the same records (Slurm may still be settling a
    change, e.g. a job's end time), then return what the last one re-parsed."""
    backend.poll()
    return wait_for(lambda: (backend.poll(), backend.reconciled == 0)[1] or None, 30,
                    "a quiet poll") and backend.reconciled


def test_a_quiet_poll_reparses_nothing_and_every_change_is_seen_at_the_next_poll(cluster, tmp_path):
    stop = tmp_path / "stop"
    queue = [sbatch(cluster, tmp_path, "-p", "v100", *GAVEL, "--wrap", "sleep 300") for _ in range(4)]
    ends = sbatch(cluster, tmp_path, "-p", "p100", *GAVEL,
                  "--wrap", f"while [ ! -e {stop} ]; do sleep 0.2; done")
    cancelled = sbatch(cluster, tmp_path, "-p", "p100", *GAVEL, "--wrap", "sleep 300")
    requeued = sbatch(cluster, tmp_path, "-p", "k80", *GAVEL, "--wrap", "sleep 300")
    for job in (ends, cancelled, requeued):      # the plugin held them; run them as a start would
        cluster.run(["scontrol", "release", job])
        wait_job(cluster, job, ("RUNNING",))
    backend = SlurmBackend(SlurmCLI(env=cluster.env), WallClock())
    backend.poll()
    assert backend.reconciled >= 7                        # the first poll reads every record
    assert quiet_poll(backend) == 0
    backend.poll()
    assert backend.reconciled == 0
    assert {*queue, ends, cancelled, requeued} <= set(backend._jobs)

    stop.write_text("")
    wait_job(cluster, ends, ("COMPLETED",))
    backend.poll()
    assert ends not in backend._jobs and 1 <= backend.reconciled <= 2, backend.reconciled
    quiet_poll(backend)

    cluster.run(["scancel", cancelled])
    wait_job(cluster, cancelled, ("CANCELLED",))
    backend.poll()
    assert cancelled not in backend._jobs
    quiet_poll(backend)

    cluster.run(["scontrol", "requeuehold", requeued])
    wait_for(lambda: (backend.poll(), backend._jobs[requeued].restarts == 1
                      and not backend._jobs[requeued].running)[1], 30, "requeued, stopped")
    assert backend._jobs[requeued].held and backend.reconciled >= 1
    quiet_poll(backend)

    before = {s.id: s for s in backend.observe().jobs}[queue[0]]
    assert before.weight == 1.0 and before.job_type == "convnet"
    cluster.run(["scontrol", "update", f"jobid={queue[0]}",
                 "AdminComment=gavel:v1 model=language-model weight=3"])
    seen = {s.id: s for s in backend.observe().jobs}[queue[0]]
    assert backend.reconciled == 1
    assert seen.weight == 3.0 and seen.job_type == "language-model"   # flags parsed again
    quiet_poll(backend)

    new = sbatch(cluster, tmp_path, "-p", "v100", *GAVEL, "--wrap", "sleep 300")
    backend.poll()
    assert new in backend._jobs and backend.reconciled == 1, backend.reconciled


def poll_cost(cluster, backend: SlurmBackend) -> tuple[dict, dict, int]:
    """One poll's Slurm commands and slurmctld RPCs by type (sdiag deltas), and its re-parsed
    records."""
    cli = backend.cli
    commands, before = dict(cli.commands), rpcs(cluster)
    backend.observe()
    after = rpcs(cluster)
    spent = {c: n - commands.get(c, 0) for c, n in cli.commands.items() if n != commands.get(c, 0)}
    calls = {t: c - before.get(t, 0) for t, c in after.items()
             if t not in BACKGROUND and c != before.get(t, 0)}
    return spent, calls, backend.reconciled


def test_a_polls_slurm_commands_and_rpcs_do_not_grow_with_the_queue(cluster, tmp_path):
    backend = SlurmBackend(SlurmCLI(env=cluster.env), WallClock())
    jobs = [sbatch(cluster, tmp_path, "-p", "v100", *GAVEL, "--wrap", "sleep 300") for _ in range(4)]
    wait_for(lambda: (backend.observe(), set(jobs) <= set(backend._jobs))[1], 30, "4 jobs listed")
    quiet_poll(backend)
    small = poll_cost(cluster, backend)
    jobs += [sbatch(cluster, tmp_path, "-p", "v100", *GAVEL, "--wrap", "sleep 300") for _ in range(36)]
    wait_for(lambda: (backend.observe(), set(jobs) <= set(backend._jobs))[1], 30, "40 jobs listed")
    quiet_poll(backend)
    large = poll_cost(cluster, backend)
    assert small[0].get("squeue") and small[1].get("REQUEST_JOB_INFO"), small
    assert small[2] == large[2] == 0, (small, large)
    assert small[0] == large[0], (small, large)           # the same commands, as many
    assert small[1] == large[1], (small, large)           # the same RPCs, as many
