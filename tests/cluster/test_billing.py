"""`slurm-gavel billing`: TRESBillingWeights from measured throughputs, the table and the mix.

A small table of two models, a real daemon database (SqliteStore's own schema, in a temporary
dir) holding the site's jobs, their GPU time and one measured throughput, and the partitions
read from the real local cluster.
"""
from __future__ import annotations

import json

import pytest

from slurm_gavel.cli import main
from slurm_gavel.core.errors import InputError
from slurm_gavel.estimator.table import ThroughputTable
from slurm_gavel.slurm.billing import speeds, suggest
from slurm_gavel.daemon.store import SqliteStore

# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24

# A: v100 4x k80; B: v100 2x k80 (steps/s)
TABLE = {"k80": {"('A', 1)": {"null": 1.0}, "('B', 1)": {"null": 2.0}},
         "v100": {"('A', 1)": {"null": 4.0}, "('B', 1)": {"null": 4.0}}}


@pytest.fixture
def files(tmp_path):
    table = tmp_path / "table.json"
    table.write_text(json.dumps(TABLE))
    db = tmp_path / "gavel.db"
    store = SqliteStore(db)
    # the site's mix: A received 3 GPU-hours, B 1 (B's job on 2 GPUs for half an hour)
    store.db["jobs"].insert_all([{"id": "1", "model": "A", "scale_factor": 1, "state": "finished"},
                                 {"id": "2", "model": "B", "scale_factor": 1, "state": "finished"},
                                 {"id": "3", "model": "A", "scale_factor": 1, "state": "active"}])
    store.db["job_time"].insert_all([{"job": "1", "worker_type": "v100", "seconds": 7200.0},
                                     {"job": "3", "worker_type": "k80", "seconds": 3600.0},
                                     {"job": "2", "worker_type": "k80", "seconds": 3600.0}])
    store.close()
    return table, db


def run(capsys, *args):
    code = main(["billing", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_weights_are_the_mix_weighted_speedup_over_the_slowest_type(files, capsys):
    table, db = files
    code, out, _ = run(capsys, "--throughputs", table, "--db", db, "--partitions", "gpu-v=v100,gpu-k=k80")
    assert code == 0
    # (3 h x 4 + 1 h x 2) / 4 h = 3.5
    assert 'PartitionName=gpu-v TRESBillingWeights="GRES/gpu=3.5"' in out.splitlines()
    assert 'PartitionName=gpu-k TRESBillingWeights="GRES/gpu=1"' in out.splitlines()
    assert "k80 is the slowest type" in out and "speedups 2-4" in out


def test_a_measured_throughput_replaces_the_tables(files, capsys):
    table, db = files
    store = SqliteStore(db)
    store.save_throughputs([{"model": "B", "scale_factor": 1, "worker_type": "v100", "partner": "",
                             "spread": 0, "steps_per_second": 6.0, "samples": 5, "updated": 0.0},
                            {"model": "B", "scale_factor": 1, "worker_type": "v100", "partner": "A",
                             "spread": 0, "steps_per_second": 0.1, "samples": 5, "updated": 0.0}])
    store.close()
    code, out, _ = run(capsys, "--throughputs", table, "--db", db, "--partitions", "v=v100,k=k80",
                       "--json", "--scale", "2")
    data = json.loads(out)
    assert code == 0 and data["sources"] == {"measured": 1, "table": 3}   # the pair row is not a speed
    # B's speedup is now 3: (3 x 4 + 1 x 3) / 4 = 3.75, times the scale 2
    assert data["weights"]["v100"]["weight"] == pytest.approx(7.5)
    assert data["lines"] == ['PartitionName=v TRESBillingWeights="GRES/gpu=7.5"',
                             'PartitionName=k TRESBillingWeights="GRES/gpu=2"']


def test_without_a_database_every_table_model_counts_alike(files, capsys):
    table, _ = files
    code, out, _ = run(capsys, "--throughputs", table, "--no-db", "--partitions", "v=v100,k=k80,both=v100,both=k80")
    assert code == 0 and "GRES/gpu=3\"" in out and "every table model weighted equally" in out
    assert "partition both mixes k80, v100: no single weight" in out
    assert "PartitionName=both" not in out


def test_bad_input(files, capsys):
    table, db = files
    for args, field in ((["--partitions", "v100"], "--partitions"), (["--scale", "0"], "--scale"),
                        (["--db", db.parent / "none.db"], "no database")):
        code, _, err = run(capsys, "--throughputs", table, *(["--partitions", "v=v100"] if field != "--partitions" else []), *args)
        assert code != 0 and field in err and len(err.strip().splitlines()) == 1
    with pytest.raises(InputError):
        suggest(*speeds(ThroughputTable.from_gavel_dict(TABLE), [])[:1], {("C", 1): 1.0}, ["v100"], {})


def test_partitions_from_the_real_cluster(files, slurm_cluster, monkeypatch, capsys):
    """The session's cluster (v100, p100, k80 partitions): the table has no P100 speed."""
    table, db = files
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.slurm_conf))
    code, out, _ = run(capsys, "--throughputs", table, "--db", db)
    assert code == 0
    assert [line for line in out.splitlines() if not line.startswith("#")] == [
        'PartitionName=k80 TRESBillingWeights="GRES/gpu=1"',
        'PartitionName=v100 TRESBillingWeights="GRES/gpu=3.5"']
    assert "#   p100: no model of the mix has a speed on it and on k80: no weight" in out
