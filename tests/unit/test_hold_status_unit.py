"""A held gavel job says in Slurm that slurm-gavel holds it and why (its AdminComment, which
every user reads in `scontrol show job`), on the real local cluster: written in one
`scontrol update` for jobs sharing a text, gone once the daemon starts the job; the flags
still read.

The cases of tests/cluster/test_hold_status.py that need no Slurm cluster.
"""
from __future__ import annotations

from slurm_gavel.slurm.flags import admin_flags, admin_status, from_admin_comment, with_status


def test_status_text_is_kept_apart_from_the_flags():
    flags = "gavel:v1 model=resnet18 weight=1"
    text = with_status(flags, "held by slurm-gavel: waiting | \x1b[31mred\n")
    assert text == flags + " | held by slurm-gavel: waiting ? ?[31mred"
    assert admin_flags(text) == flags and admin_status(text).startswith("held by")
    assert from_admin_comment(text) == from_admin_comment(flags)
    assert with_status(text, "") == flags
    assert len(with_status(flags, "x" * 1000)) == len(flags) + 3 + 200
