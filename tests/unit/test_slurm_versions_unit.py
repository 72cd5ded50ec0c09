"""The Slurm version a recorded `--json` answer names, which decides whether the driver reads
--exclusive from squeue's JSON (22.05, 24.11) or asks `squeue -O JobID,Exclusive` (25.05+)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from slurm_gavel.slurm.commands import EXCLUSIVE_APART, json_version

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("name,version", [("squeue-22.05.json", (22, 5, 8)),
                                          ("squeue-24.11.json", (24, 11, 5)),
                                          ("nodes-24.11.json", (24, 11, 5))])
def test_recorded_answers_name_their_version(name, version):
    data = json.loads((FIXTURES / name).read_text())
    assert json_version(data) == version
    assert json_version(data) < EXCLUSIVE_APART        # both still say --exclusive in `shared`


def test_26_05_meta_and_missing_or_odd_meta():
    meta = {"slurm": {"version": {"major": "26", "minor": "05", "micro": "5"}, "release": "26.05.5"}}
    assert json_version({"meta": meta}) == (26, 5, 5) >= EXCLUSIVE_APART
    for data in ({}, {"meta": None}, {"meta": {"slurm": {"version": {"major": "x"}}}}, [], None):
        assert json_version(data) == ()
