#!/usr/bin/env python3
"""A poll's reconcile at scale without a cluster: `SlurmBackend.observe` on recorded records.

Slurm's side is the recorded 22.05 queue and nodes (tests/fixtures): the pending gavel job
copied N times (held, as the job_submit plugin leaves them) beside a running gavel job and
a plain one, on the recorded nodes copied to M per type (3 types).  Prints the seconds of
the first observation (every record parsed, every verdict worked out), of a quiet one (the
same records again, as a new `squeue --json`), and of one where a tenth of the records
changed (their AdminComment, as a round's status writes change it), with the records each
parsed again (`SlurmBackend.reconciled`); the median of `--repeat` runs each.

    python bench/reconcile_records.py                    # 5,000 jobs, 3 x 67 nodes
    python bench/reconcile_records.py --jobs 50000 --nodes 400
"""
from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slurm_gavel.core.clock import WallClock  # noqa: E402
from slurm_gavel.slurm.backend import SlurmBackend  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures"


class RecordedCLI:
    def __init__(self, jobs: int, nodes: int):
        data = json.loads((FIXTURES / "squeue-22.05.json").read_text())
        by_id = {j["job_id"]: j for j in data["jobs"]}
        self.meta = data.get("meta")
        self.jobs = [by_id[1], by_id[4]]
        for i in range(jobs):
            j = copy.deepcopy(by_id[2])
            j.update(job_id=100 + i, priority=0, state_reason="JobHeldAdmin")
            self.jobs.append(j)
        recorded = json.loads((FIXTURES / "sinfo-22.05.json").read_text())
        self.node_data = dict(recorded, nodes=[
            dict(copy.deepcopy(n), name=n["name"][:-1] + str(i), hostname=n["name"][:-1] + str(i))
            for n in recorded["nodes"] if n["name"].endswith("-0") for i in range(nodes)])

    def squeue(self):
        return {"jobs": copy.deepcopy(self.jobs), "meta": self.meta}   # a new poll: new JSON

    def nodes(self):
        return self.node_data


def timed(backend: SlurmBackend) -> tuple[float, int]:
    started = time.perf_counter()
    backend.observe()
    return time.perf_counter() - started, getattr(backend, "reconciled", -1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--nodes", type=int, default=67, help="nodes per type (3 types)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rows: dict[str, list[tuple[float, int]]] = {"first": [], "quiet": [], "a tenth changed": []}
    for _ in range(args.repeat):
        cli = RecordedCLI(args.jobs, args.nodes)
        backend = SlurmBackend(cli, WallClock())
        rows["first"].append(timed(backend))
        rows["quiet"].append(timed(backend))
        for j in cli.jobs[2::10]:
            j["admin_comment"] += " | waits: its turn"
        rows["a tenth changed"].append(timed(backend))
    print(f"{args.jobs} gavel jobs + 2, {3 * args.nodes} nodes; median of {args.repeat}")
    for name, runs in rows.items():
        print(f"{name:>16}: {statistics.median(s for s, _ in runs):6.2f} s, "
              f"{runs[-1][1]} records parsed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
