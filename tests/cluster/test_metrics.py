"""The daemon's Prometheus endpoint on the real local cluster, scraped with a real HTTP client.

The numbers are checked against what Slurm itself says (squeue, sinfo): GPUs that gavel
jobs run on, GPUs of a plain (non-gavel) job, a drained node's GPUs, gavel jobs by state;
a second start on the same database counts a restart; a port in use is one line at start.
"""
from __future__ import annotations

import socket
import time

import pytest

from slurm_gavel.slurm.commands import SlurmCommandError
from slurm_gavel.daemon.metrics import CountingCLI, Metrics
from tests.support.daemon import start_daemon, stop_daemon, submit, write_config
from tests.support.metrics import free_port, pick, scrape


def slurm_view(cluster, gavel_ids) -> dict:
    """What Slurm says: GPUs per (partition, gavel|other) of running jobs, gavel jobs running
    and pending, and GPUs on drained or down nodes per partition."""
    out = {"gpus": {}, "running": 0, "pending": 0, "down": {}}
    lines = cluster.run(["squeue", "-h", "-o", "%i|%T|%P|%b|%D"]).stdout.splitlines()
    for line in lines:
        job, state, partition, gres, nodes = line.split("|")
        if job in gavel_ids:
            out["running" if state == "RUNNING" else "pending"] += state in ("RUNNING", "PENDING")
        if state != "RUNNING":
            continue
        gpus = int(gres.rsplit(":", 1)[-1]) * int(nodes)      # gres/gpu:2 or gpu:2, per node
        key = (partition, "gavel" if job in gavel_ids else "other")
        out["gpus"][key] = out["gpus"].get(key, 0) + gpus
    for line in cluster.run(["sinfo", "-h", "-N", "-o", "%N|%P|%t|%G"]).stdout.splitlines():
        node, partition, state, gres = line.split("|")
        if state.startswith(("drain", "down", "drng")):
            partition = partition.rstrip("*")
            out["down"][partition] = out["down"].get(partition, 0) + int(gres.split("(")[0].rsplit(":", 1)[-1])
    return out


def test_metrics_endpoint_matches_slurm(clean, tmp_path):
    cluster = clean
    port = free_port()
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1, metrics_port=port)
    drained = "k80-1" if "k80-1" in cluster.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout else None
    assert drained, cluster.run(["sinfo", "-h", "-N", "-o", "%N"]).stdout
    cluster.run(["scontrol", "update", f"nodename={drained}", "state=drain", "reason=metrics-test"])
    plain = cluster.run(["sbatch", "--parsable", "-p", "p100", "--gres=gpu:1", "-o", "/dev/null",
                         "--wrap", "sleep 120"]).stdout.strip().split(";")[0]
    gavel = {submit(cluster, tmp_path, "convnet", 1, 60), submit(cluster, tmp_path, "rl-agent", 2, 60),
             submit(cluster, tmp_path, "translation", 1, 60)}
    daemon = start_daemon(config)
    try:
        deadline, agreed = time.time() + 90, None
        while time.time() < deadline and agreed is None:
            time.sleep(2)
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            try:
                before = scrape(port)
            except OSError:
                continue            # not listening yet
            slurm = slurm_view(cluster, gavel)
            after = scrape(port)
            # a poll between the two scrapes changes the numbers: take a quiet moment
            if slurm["running"] == len(gavel) and pick(after, "slurm_gavel_jobs", state="running") == 3 and all(
                    pick(before, "slurm_gavel_gpus", partition=p, state=s)
                    == pick(after, "slurm_gavel_gpus", partition=p, state=s)
                    for p in ("v100", "p100", "k80") for s in ("gavel", "other", "idle", "down")):
                agreed = (after, slurm)
        assert agreed is not None, "the gavel jobs never all ran while the endpoint was scraped"
        samples, slurm = agreed
        for p in ("v100", "p100", "k80"):
            for s in ("gavel", "other"):
                assert pick(samples, "slurm_gavel_gpus", partition=p, state=s) == \
                    slurm["gpus"].get((p, s), 0), (p, s, slurm)
            assert pick(samples, "slurm_gavel_gpus", partition=p, state="down") == slurm["down"].get(p, 0)
            total = sum(pick(samples, "slurm_gavel_gpus", partition=p, state=s)
                        for s in ("gavel", "other", "idle", "down"))
            assert total == 8, (p, total)             # 2 nodes x 4 GPUs each
        assert pick(samples, "slurm_gavel_gpus", partition="k80", state="down") == 4
        assert pick(samples, "slurm_gavel_gpus", partition="p100", state="other") == 1
        assert pick(samples, "slurm_gavel_gpus", state="gavel") == 4      # 1 + 2 + 1
        assert pick(samples, "slurm_gavel_jobs", state="running") == slurm["running"] == 3
        assert pick(samples, "slurm_gavel_jobs", state="pending") == 0
        # the allocation in force gives the three jobs about their 4 GPUs (a share each <= 1)
        alloc = pick(samples, "slurm_gavel_allocation_gpus")
        assert 0 < alloc <= 4 + 1e-6, alloc
        assert pick(samples, "slurm_gavel_rounds_total") >= 1
        assert pick(samples, "slurm_gavel_round_duration_seconds_count") >= 1
        assert pick(samples, "slurm_gavel_solve_duration_seconds_count") >= 1
        assert pick(samples, "slurm_gavel_daemon_restarts_total") == 0
        assert pick(samples, "slurm_gavel_database_writable") == 1
        # retention's view of the database: its size and rows per table
        assert pick(samples, "slurm_gavel_database_bytes") > 0
        assert pick(samples, "slurm_gavel_database_rows", table="jobs") >= 3
        assert pick(samples, "slurm_gavel_database_rows", table="rounds") >= 1
        assert ("slurm_gavel_preemptions_total", ()) not in samples     # labelled: none yet
        assert not any(n == "slurm_gavel_job_allocation_share" for n, _ in samples)   # opt-in
        assert not any(dict(ls).get("user") for _, ls in samples)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scontrol", "update", f"nodename={drained}", "state=resume"], check=False)
        cluster.run(["scancel", plain], check=False)
    assert code == 0, log[-3000:]
    assert f"metrics: http://127.0.0.1:{port}/metrics" in log

    # started again on the same database (per-job series asked for): one restart
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1, metrics_port=port,
                          metrics_per_job=True)
    daemon = start_daemon(config)
    try:
        deadline, samples = time.time() + 60, {}
        while time.time() < deadline and not pick(samples, "slurm_gavel_rounds_total"):
            time.sleep(1)
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            try:
                samples = scrape(port)
            except OSError:
                pass
        assert pick(samples, "slurm_gavel_daemon_restarts_total") == 1
        jobs = {dict(ls)["job"] for n, ls in samples if n == "slurm_gavel_job_allocation_share"}
        assert jobs and jobs <= gavel, jobs
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]


def test_metrics_port_in_use_is_one_line_at_start(slurm_cluster, tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path, slurm_cluster, metrics_port=port)
        daemon = start_daemon(config)
        code, log = stop_daemon(daemon) if daemon.wait(timeout=60) is None else (
            daemon.returncode, daemon.stdout.read())
    assert code == 75, log
    errors = [line for line in log.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and f"127.0.0.1:{port} is in use" in errors[0], log
    assert "Traceback" not in log
    assert not (tmp_path / "gavel.db").exists()          # nothing touched


def test_failed_slurm_commands_are_counted_per_command(slurm_cluster):
    metrics = Metrics()
    cli = CountingCLI(env=slurm_cluster.env)
    cli.failed = lambda command: metrics.command_errors.labels(command=command).inc()
    cli.squeue()                                           # works: not counted
    for _ in range(2):
        with pytest.raises(SlurmCommandError):
            cli.release(["99999999"])                      # no such job
    value = metrics.registry.get_sample_value
    assert value("slurm_gavel_slurm_command_errors_total", {"command": "scontrol release"}) == 2
    assert value("slurm_gavel_slurm_command_errors_total", {"command": "squeue"}) is None


def test_sighup_keeps_the_endpoint_and_says_so(slurm_cluster, tmp_path):
    import signal
    port, other = free_port(), free_port()
    config = write_config(tmp_path, slurm_cluster, round_seconds=4, tick_seconds=1, metrics_port=port)
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                scrape(port)
                break
            except OSError:
                time.sleep(0.5)
        write_config(tmp_path, slurm_cluster, round_seconds=5, tick_seconds=1, metrics_port=other)
        daemon.send_signal(signal.SIGHUP)
        time.sleep(7)            # read at the next round (4 s)
        assert pick(scrape(port), "slurm_gavel_rounds_total") >= 0       # still served there
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert f"reload: metrics_port takes effect at the next restart (kept: {port})" in log, log[-3000:]
    assert "reloaded" in log and "rounds of 5 s" in log
