"""The cluster tier's fixtures: real local Slurm clusters, shared by the tests that ask for them.

`slurm_cluster`: one real local Slurm cluster (slurm_gavel.devcluster) for the whole
session: 3 GPU types x 2 nodes x 4 fake GPUs, the repository's job_submit.lua when
present, random free ports.  Skipped where Slurm is missing or we are not root,
except under CI (the CI variable set), where that is a failure: CI must run them.

`slurm_shard_cluster`: a small cluster with gres/shard on every GPU (space sharing), started
only when a test asks for it.

`slurm_memory_cluster`: a small cluster where Slurm counts memory (CR_Core_Memory,
DefMemPerCPU=2048), started only when a test asks for it.

`slurm_accounting_cluster`: a second, smaller cluster with accounting (its own MariaDB and
slurmdbd; sacct, sacctmgr, associations enforced), started only when a test asks for it.

"Session" is one pytest process: under pytest-xdist (tools/test.sh runs this tier with
`-n 2 --dist loadfile`) each worker starts its own clusters, in its own basetemp folder (state,
spool, munged socket) on its own random ports, and a file's tests all run in one worker.
"""
from __future__ import annotations

import pytest

from slurm_gavel.devcluster import DEFAULT_TYPES, default_job_submit_lua

from tests.support.slurm import (ACCOUNTING_TYPES, MEMORY_TYPES, SHARD_TYPES, SHARDS_PER_GPU, require_slurm,
                                 running_cluster, shard_job_submit_lua)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("slurm"), DEFAULT_TYPES,
                         job_submit_lua=default_job_submit_lua()) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_shard_cluster(tmp_path_factory):
    require_slurm()
    lua = shard_job_submit_lua(tmp_path_factory.mktemp("shard-lua"))
    with running_cluster(tmp_path_factory.mktemp("shard"), SHARD_TYPES, job_submit_lua=lua,
                         shards=SHARDS_PER_GPU) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_memory_cluster(tmp_path_factory):
    require_slurm()
    with running_cluster(tmp_path_factory.mktemp("mem"), MEMORY_TYPES,
                         job_submit_lua=default_job_submit_lua(), memory=True) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def slurm_accounting_cluster(tmp_path_factory):
    require_slurm(accounting=True)
    with running_cluster(tmp_path_factory.mktemp("acct"), ACCOUNTING_TYPES,
                         job_submit_lua=default_job_submit_lua(), accounting=True) as cluster:
        yield cluster


@pytest.fixture
def clean(slurm_cluster):
    """The session cluster with no job of root's before and after the test."""
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
    yield slurm_cluster
    slurm_cluster.run(["scancel", "--user", "root"], check=False)
