"""Multi-GPU pairs on Slurm 23.11+ (issue 13 §2, docs/space-sharing.md "Multi-GPU pairs"):
what Slurm does with shards spread over several GPUs, measured on a one-node cluster of
four fake GPUs with 4 shards each and SelectTypeParameters MULTIPLE_SHARING_GRES_PJ and
ONE_TASK_PER_SHARING_GRES.  These are the facts a multi-GPU pair would rest on; the
backend does not run such pairs yet (its `max_pair_gpus` is 1), and these tests keep the
facts true on the Slurm that runs them (skipped before 23.11, which has neither flag).

The cases of tests/cluster/test_multi_gpu_shards.py that need no Slurm cluster.
"""
from __future__ import annotations

import pytest


# Run again on Slurm 24.11 by tools/test.sh (what differs between Slurm versions).
pytestmark = pytest.mark.slurm24


def test_doctor_names_the_select_flags_that_break_pairs_only_with_space_sharing():
    from slurm_gavel.slurm.doctor import check_sharing_select
    both = {"SelectTypeParameters": "CR_CORE,LL_SHARED_GRES,MULTIPLE_SHARING_GRES_PJ"}
    assert check_sharing_select(both, space_sharing=False) == []
    found = check_sharing_select(both, space_sharing=True)
    assert [f["level"] for f in found] == ["warning", "warning"]
    assert "LL_SHARED_GRES" in found[0]["finding"] and "MULTIPLE_SHARING_GRES_PJ" in found[1]["finding"]
    assert check_sharing_select({"SelectTypeParameters": "CR_CORE_MEMORY"}, space_sharing=True) == []
    assert check_sharing_select({}, space_sharing=True) == []
