"""Entity weights for the hierarchical policy: from gavel.toml's [entities] and from Slurm's
fairshare (sacctmgr shares), through the engine to the policy's input and its allocation."""
from __future__ import annotations

import numpy as np
import pytest

from slurm_gavel.core.clock import SimulatedClock
from slurm_gavel.core.engine import Engine, build_policy_input
from slurm_gavel.core.recompute import Immediate
from slurm_gavel.core.store import MemoryStore
from slurm_gavel.estimator.table import TableThroughputs
from slurm_gavel.policies import make_policy
from slurm_gavel.sim.simulator import SimulatedCluster

from tests.support.engine import job, small_table
from tests.support.users import Entities

ENTITY = {"0": "physics", "1": "physics", "2": "chem", "3": "chem"}


def shares(allocation, entity):
    return sum(float(allocation.x[i].sum()) for i, j in enumerate(allocation.job_ids)
               if ENTITY[j] == entity)


def test_the_engine_hands_entity_weights_to_the_policy_and_a_change_resolves():
    table = small_table()
    clock = SimulatedClock()
    jobs = [job("fast", 10 ** 7) for _ in range(4)]
    backend = Entities(SimulatedCluster(jobs, table, {"v100": 3}, clock), ENTITY)   # one type: x is the share
    engine = Engine(clock, backend, Immediate(make_policy("hierarchical")), TableThroughputs(table),
                    MemoryStore(), 60.0)
    assert [j for j in ENTITY] == [j.id for j in backend.observe().jobs]
    engine.step()
    assert engine.input.entity_weights == {}
    equal = engine.allocation
    assert shares(equal, "physics") == pytest.approx(1.5, rel=1e-3) == shares(equal, "chem")
    resets = engine.resets
    engine.entity_weights = {"physics": 3.0}
    engine.step()
    assert engine.resets == resets + 1            # a new weight is a reset event: solved again
    # normalized by the median of the jobs' entities' weights (3 and chem's default 1)
    assert engine.input.entity_weights == {"physics": 1.5, "chem": 0.5}
    weighted = engine.allocation
    # 3:1 of 3 GPUs, capped at one GPU per job: physics 2, chem 1 (equal weights: 1.5 each)
    assert shares(weighted, "physics") == pytest.approx(2.0, rel=1e-3)
    assert shares(weighted, "chem") == pytest.approx(1.0, rel=1e-3)
    engine.step()
    assert engine.resets == resets + 1            # unchanged weights: no new solve


def test_build_policy_input_normalizes_the_present_entities_weights():
    table = small_table()
    clock = SimulatedClock()
    backend = Entities(SimulatedCluster([job("fast", 100) for _ in range(4)], table, {"v100": 2}, clock),
                       ENTITY)
    obs = backend.observe()
    t = TableThroughputs(table).lookup(obs.jobs, ("v100",))
    inp = build_policy_input(obs.jobs, {}, t, ("v100",), np.array([2.0]), 0.0,
                             entity_weights={"physics": 4, "chem": 2, "absent": 100})
    assert inp.entity_weights == {"physics": pytest.approx(4 / 3), "chem": pytest.approx(2 / 3)}
    assert build_policy_input(obs.jobs, {}, t, ("v100",), np.array([2.0]), 0.0).entity_weights == {}


# -- Slurm's fairshare: sacctmgr's shares ----------------------------------------------
from slurm_gavel.slurm.commands import SlurmCLI                       # noqa: E402
from slurm_gavel.slurm.fairshare import FairshareWeights, parse_shares  # noqa: E402

SHARES = """gavel-dev|root||1
gavel-dev|root|root|1
gavel-dev|physics||3
gavel-dev|physics|alice|1
gavel-dev|chem||parent
gavel-dev|bio||0
gavel-dev|math||-2
gavel-dev|odd name||5
other|physics||100
gavel-dev|cs||2.5|extra-field
garbage line
gavel-dev|short|
"""


def test_parse_shares_keeps_account_associations_of_this_cluster_with_a_share():
    assert parse_shares(SHARES, "gavel-dev") == {"root": 1.0, "physics": 3.0, "cs": 2.5}
    # Fairshare=parent: the parent account's shares, up the tree (a loop gives nothing)
    tree = ("c|dept||40|root\nc|lab||parent|dept\nc|sub||parent|lab\nc|x||parent|y\n"
            "c|y||parent|x\nc|lone||parent|\n")
    assert parse_shares(tree, "c") == {"dept": 40.0, "lab": 40.0, "sub": 40.0}
    assert parse_shares(SHARES, "other") == {"physics": 100.0}
    assert parse_shares("") == {}


def fake_sacctmgr(tmp_path, script: str) -> SlurmCLI:
    """A real SlurmCLI running a stand-in sacctmgr/scontrol from `tmp_path` (a real process)."""
    for tool, body in (("sacctmgr", script), ("scontrol", 'echo "ClusterName = gavel-dev"')):
        exe = tmp_path / tool
        exe.write_text("#!/bin/sh\n" + body + "\n")
        exe.chmod(0o755)
    return SlurmCLI(bin_dir=str(tmp_path), timeout=5)


def test_fairshare_weights_read_shares_and_config_entries_win(tmp_path, caplog):
    out = tmp_path / "shares.txt"
    out.write_text(SHARES)
    cli = fake_sacctmgr(tmp_path, f'cat "{out}"')
    weights = FairshareWeights(cli, {"cs": 7.0, "extra": 2.0})
    with caplog.at_level("INFO", logger="slurm_gavel.fairshare"):
        assert weights.refresh() == {"root": 1.0, "physics": 3.0, "cs": 7.0, "extra": 2.0}
        assert weights.refresh() == {"root": 1.0, "physics": 3.0, "cs": 7.0, "extra": 2.0}
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["entity weights from Slurm's fairshare shares: cs=7, extra=2, physics=3, root=1"]


def test_a_failing_sacctmgr_logs_one_line_and_keeps_the_last_weights(tmp_path, caplog):
    out = tmp_path / "shares.txt"
    out.write_text("gavel-dev|physics||3\n")
    flag = tmp_path / "fail"
    cli = fake_sacctmgr(tmp_path, f'[ -e "{flag}" ] && {{ echo "sacctmgr: error: Problem talking '
                                  f'to the database: Connection refused" >&2; exit 1; }}; cat "{out}"')
    weights = FairshareWeights(cli)
    assert weights.refresh() == {"physics": 3.0}
    flag.touch()
    caplog.clear()
    with caplog.at_level("INFO", logger="slurm_gavel.fairshare"):
        for _ in range(3):
            assert weights.refresh() == {"physics": 3.0}
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1 and "sacctmgr failed, keeping the last weights (physics=3)" in lines[0]
    assert "Connection refused" in lines[0] and "\n" not in lines[0]
    flag.unlink()
    out.write_text("gavel-dev|physics||4\n")
    caplog.clear()
    with caplog.at_level("INFO", logger="slurm_gavel.fairshare"):
        assert weights.refresh() == {"physics": 4.0}
    assert [r.getMessage() for r in caplog.records] == [
        "entity weights: sacctmgr answers again", "entity weights from Slurm's fairshare shares: physics=4"]


# -- on the real cluster with accounting ---------------------------------------------
import time                                                             # noqa: E402

from slurm_gavel.daemon.store import SqliteStore                         # noqa: E402

from tests.support.daemon import start_daemon, stop_daemon, submit, write_config

SPEED = {"v100": 34.56, "k80": 3.6}     # convnet at 4 GPUs in examples/toy_throughputs.json


def entity_throughputs(db, jobs, speed=SPEED):
    """Steps/s the allocation in force gives each entity's jobs ({} before the first one)."""
    try:
        _, shares = SqliteStore(db, readonly=True).latest_allocation()
    except Exception:           # not written yet
        return {}
    if not all(j in shares for j in jobs):
        return {}
    out = {}
    for job, entity in jobs.items():
        out[entity] = out.get(entity, 0.0) + sum(speed[wt] * x for wt, x in shares[job].items())
    return out


def wait_for(db, jobs, daemon, ratio, timeout=60, speed=SPEED):
    deadline = time.time() + timeout
    seen = {}
    while time.time() < deadline:
        assert daemon.poll() is None, daemon.communicate()[0][-3000:]
        seen = entity_throughputs(db, jobs, speed)
        if seen and seen["gavel-a"] == pytest.approx(ratio * seen["gavel-b"], rel=0.02):
            return seen
        time.sleep(0.5)
    pytest.fail(f"no allocation with gavel-a at {ratio}x gavel-b within {timeout} s: {seen}")


def test_fairshare_set_with_sacctmgr_reaches_the_policy_and_changes_the_allocation(
        slurm_accounting_cluster, tmp_path):
    cluster = slurm_accounting_cluster
    config = write_config(tmp_path, cluster, round_seconds=3, tick_seconds=1, policy="hierarchical",
                          share_by="entity", entity_weights="fairshare")
    # 16 GPUs asked of 8 (4 v100, 4 k80): gavel-a's two jobs against gavel-b's two
    jobs = {}
    try:
        for account in ("gavel-a", "gavel-a", "gavel-b", "gavel-b"):
            jobs[submit(cluster, tmp_path, "convnet", 4, 1000, extra=[f"--account={account}"])] = account
        daemon = start_daemon(config, "--dry-run")
        try:
            equal = wait_for(tmp_path / "gavel.db", jobs, daemon, 1.0)
            cluster.run(["sacctmgr", "-i", "modify", "account", "gavel-a", "set", "fairshare=3"])
            weighted = wait_for(tmp_path / "gavel.db", jobs, daemon, 3.0)
        finally:
            code, log = stop_daemon(daemon)
    finally:
        cluster.run(["sacctmgr", "-i", "modify", "account", "gavel-a", "set", "fairshare=1"], check=False)
        cluster.run(["scancel", *jobs], check=False)
    assert code == 0, log[-3000:]
    assert "entity weights from Slurm's fairshare shares: gavel-a=1, gavel-b=1" in log, log[-3000:]
    assert "entity weights from Slurm's fairshare shares: gavel-a=3, gavel-b=1" in log, log[-3000:]
    # the same cluster: a weighted entity gets more, the total stays (work is not lost)
    assert weighted["gavel-a"] > 2.5 * weighted["gavel-b"]
    assert sum(weighted.values()) == pytest.approx(sum(equal.values()), rel=0.05)


def test_entities_in_gavel_toml_weigh_and_a_sighup_changes_them(clean, tmp_path):
    """[entities] from the file reach the policy; a reload with other weights re-solves."""
    import signal
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=3, tick_seconds=1, policy="hierarchical",
                          share_by="entity")
    base = config.read_text()
    config.write_text(base + '[entities]\n"gavel-a" = 3\n')
    jobs = {}
    for account in ("gavel-a", "gavel-a", "gavel-b", "gavel-b"):    # 16 GPUs asked of v100's 8
        jobs[submit(cluster, tmp_path, "convnet", 4, 1000,
                    extra=[f"--account={account}", "--partition=v100"])] = account
    daemon = start_daemon(config, "--dry-run")
    try:
        wait_for(tmp_path / "gavel.db", jobs, daemon, 3.0, speed={"v100": 34.56})
        config.write_text(base + '[entities]\n"gavel-a" = 1\n"gavel-b" = 2\n')
        daemon.send_signal(signal.SIGHUP)
        wait_for(tmp_path / "gavel.db", jobs, daemon, 0.5, speed={"v100": 34.56})
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert "reloaded" in log, log[-3000:]
