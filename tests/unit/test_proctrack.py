"""The doctor check on Slurm's process tracking (slurm_gavel.slurm.proctrack), on config dicts
as SlurmCLI.config() returns them, and on the local test cluster's own configuration."""
from __future__ import annotations

import pytest

from slurm_gavel.slurm.proctrack import check_proctrack


@pytest.mark.parametrize("value", ["proctrack/linuxproc", "proctrack/pgid", "proctrack/cray_aries"])
def test_process_tracking_that_misses_orphans_is_a_warning(value):
    found = check_proctrack({"ProctrackType": value, "SlurmctldPort": "6817"})
    assert found["level"] == "warning" and found["check"] == "proctrack"
    assert value in found["finding"] and "proctrack/cgroup" in found["fix"]
    assert "slurm-gavel run" in found["fix"]
    assert set(found) == {"level", "check", "finding", "fix"}


@pytest.mark.parametrize("conf", [{"ProctrackType": "proctrack/cgroup"}, {"ProctrackType": "(null)"},
                                  {}])
def test_cgroup_tracking_or_nothing_said_is_no_finding(conf):
    assert check_proctrack(conf) is None


def test_the_local_test_clusters_slurm_conf_is_flagged(tmp_path):
    # the devcluster runs proctrack/linuxproc (no cgroups in a test cluster): the cluster
    # tests measure the orphans this warns about
    from slurm_gavel.devcluster import DEFAULT_TYPES, render_slurm_conf
    text = render_slurm_conf(str(tmp_path), DEFAULT_TYPES, 20001, 20002)
    conf = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    assert check_proctrack(conf)["finding"].startswith("ProctrackType=proctrack/linuxproc")
