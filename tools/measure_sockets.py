"""Which GPU Slurm gives shard jobs on a node whose GPUs are bound to sockets (docs/space-sharing.md,
"Sockets"): prints each case's jobs with their CPU_IDs, gres_detail and CUDA_VISIBLE_DEVICES.

    python tools/measure_sockets.py /tmp/sockets            # this host's Slurm (root)
    bash tools/slurm-chroot.sh python tools/measure_sockets.py /tmp/sockets   # Slurm 24.11
    ... --unbound                                            # shard lines without Cores=

A DevCluster of one node, 4 fake GPUs x 4 shards, 2 sockets of 4 cores (GPUs 0,1 on cores 0-3,
GPUs 2,3 on cores 4-7), on random free ports; stopped at the end.  The jobs sleep; every case
starts from an empty node.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from slurm_gavel.devcluster import DevCluster, pick_ports, slurm_version  # noqa: E402

SCRIPT = ("#!/bin/bash\necho \"$CUDA_VISIBLE_DEVICES\" > \"$OUT/$SLURM_JOB_ID.env\"\nsleep 300\n")

# (what, [[sbatch options of a job started before], ...], [[options of the jobs released together]])
CASES = [
    ("a pair on an empty node", [], [["--gres=shard:2"]] * 2),
    ("two whole-GPU shard jobs, one after the other", [["--gres=shard:4"]], [["--gres=shard:4"]]),
    ("the same, enforce-binding", [["--gres=shard:4", "--gres-flags=enforce-binding"]],
     [["--gres=shard:4", "--gres-flags=enforce-binding"]]),
    ("a pair, disable-binding", [], [["--gres=shard:2", "--gres-flags=disable-binding"]] * 2),
    ("a pair, enforce-binding", [], [["--gres=shard:2", "--gres-flags=enforce-binding"]] * 2),
    ("a pair, -m block:block", [], [["--gres=shard:2", "-m", "block:block"]] * 2),
    ("a pair, -c 4", [], [["--gres=shard:2", "-c", "4"]] * 2),
    ("-n3, then a pair", [["-n3"]], [["--gres=shard:2"]] * 2),
    ("-n4, then a pair", [["-n4"]], [["--gres=shard:2"]] * 2),
    ("-n4, then one shard:2", [["-n4"]], [["--gres=shard:2"]]),
    ("-n4, then one shard:2 enforce-binding", [["-n4"]], [["--gres=shard:2", "--gres-flags=enforce-binding"]]),
    ("-n4, then gpu:1, then gpu:1", [["-n4"], ["--gres=gpu:1"]], [["--gres=gpu:1"]]),
    ("shard:4, shard:4, then shard:2", [["--gres=shard:4"], ["--gres=shard:4"]], [["--gres=shard:2"]]),
]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path)
    p.add_argument("--unbound", action="store_true", help="shard lines without Cores=")
    args = p.parse_args(argv)
    d = args.directory.absolute()
    d.mkdir(parents=True, exist_ok=True)
    (d / "job.sh").write_text(SCRIPT)
    ctld, slurmd = pick_ports(1)
    c = DevCluster(d / "c", {"v100": (1, 4)}, ctld_port=ctld, slurmd_port=slurmd, shards=4,
                   sockets=2, bind_shards=not args.unbound)

    def sbatch(*opts) -> str:
        return c.run(["sbatch", "--parsable", "-o", "/dev/null", f"--export=ALL,OUT={d}", *opts,
                      str(d / "job.sh")]).stdout.strip()

    def wait(jobs, seconds=30.0) -> None:
        deadline = time.time() + seconds
        while time.time() < deadline:
            data = {str(j["job_id"]): j for j in json.loads(c.run(["squeue", "--json"]).stdout)["jobs"]}
            if all("RUNNING" in str(data[j]["job_state"]) and (d / f"{j}.env").exists() for j in jobs):
                return
            time.sleep(0.5)

    def line(job) -> str:
        shown = c.run(["scontrol", "-d", "show", "job", job]).stdout
        where = next((w.strip() for w in shown.splitlines() if "CPU_IDs=" in w), "not running")
        env = d / f"{job}.env"
        return f"  job {job}: {where} CUDA_VISIBLE_DEVICES={env.read_text().strip() if env.exists() else '-'}"

    c.up()
    try:
        print(f"Slurm {'.'.join(map(str, slurm_version()))}, shard lines "
              f"{'without' if args.unbound else 'with'} Cores=")
        print(c.run(["sinfo", "-N", "-h", "-o", "%N %G %z"]).stdout.strip())
        for what, before, together in CASES:
            print(what)
            for opts in before:
                job = sbatch(*opts)
                wait([job])
                print(line(job))
            jobs = [sbatch("-H", *opts) for opts in together]
            c.run(["scontrol", "release", ",".join(jobs)])
            wait(jobs)
            for job in jobs:
                print(line(job))
            c.run(["scancel", "--user", "root"], check=False)
            deadline = time.time() + 30
            while c.run(["squeue", "-h", "-o", "%i"]).stdout.strip() and time.time() < deadline:
                time.sleep(0.3)
        held = sbatch("-H", "--gres=shard:2")
        said = c.run(["scontrol", "update", f"jobid={held}", "GresFlags=disable-binding"], check=False)
        print("scontrol update GresFlags=disable-binding:", (said.stderr or said.stdout).strip())
    finally:
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
