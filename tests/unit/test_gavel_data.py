"""Gavel's throughput tables and traces ship in the package, unchanged and with their MIT notice."""
from __future__ import annotations

import configparser
import hashlib
import re
from pathlib import Path

import pytest

from slurm_gavel.estimator.gavel_data import DIRECTORY, gavel_data
from slurm_gavel.estimator.table import ThroughputTable

ROOT = Path(__file__).resolve().parents[2]


def test_the_tables_are_gavels_files_byte_for_byte():
    # the sha256 sums the data's README gives for the files of Gavel's repository
    readme = gavel_data("README.md").read_text()
    for name in ("simulation_throughputs.json", "physical_cluster_throughputs.json"):
        expected = re.search(rf"`{re.escape(name)}` \|[^|]*\|[^|]*\| `([0-9a-f]{{64}})`", readme).group(1)
        assert hashlib.sha256(gavel_data(name).read_bytes()).hexdigest() == expected, name
        table = ThroughputTable.from_gavel_json(gavel_data(name))
        assert {"v100", "p100", "k80"} <= set(table.worker_types)


def test_the_mit_notice_goes_with_them():
    notice = gavel_data("LICENSE").read_text()
    assert notice.startswith("MIT License")
    assert "Copyright (c) 2020 Stanford Future Data Systems" in notice


def test_the_eight_physical_cluster_traces_are_there():
    traces = sorted(p.name for p in gavel_data("traces/physical_cluster").glob("*.trace"))
    assert traces == ["artifact_evaluation.trace", "debug.trace", "debug_v2.trace", "highmem_test.trace",
                      "max_min_fairness.trace", "medium_test.trace", "minimize_makespan.trace",
                      "small_test.trace"]


def test_a_missing_file_is_an_error_not_a_path_to_nothing():
    with pytest.raises(FileNotFoundError, match="no 'nosuch.json' in the packaged Gavel data"):
        gavel_data("nosuch.json")


def test_package_data_covers_every_file():
    """setup.cfg's package_data patterns match every file of the data directory (so an
    installed package has them all)."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    patterns = cfg["options.package_data"]["slurm_gavel.estimator"].split()
    base = DIRECTORY.parents[1]                     # slurm_gavel/estimator
    files = [p.relative_to(base) for p in DIRECTORY.rglob("*") if p.is_file()]
    assert files
    missed = [str(f) for f in files if not any(f.match(pattern) and len(f.parts) == len(Path(pattern).parts)
                                                for pattern in patterns)]
    assert not missed, f"not in setup.cfg's package_data: {missed}"
