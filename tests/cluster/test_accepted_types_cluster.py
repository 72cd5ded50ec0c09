"""A job restricted to some GPU types (types=, sbatch -p, --constraint): never given a share
of another type, never started there; an unknown type is said clearly.

The cases of tests/unit/test_accepted_types.py that need a real Slurm cluster.
"""
from __future__ import annotations

import json
import re
import time

from slurm_gavel.cli.queue import main as gqueue

from tests.support.daemon import queue, segments, start_daemon, stop_daemon, submit, write_config


def _read(path):
    return path.read_text() if path.exists() else ""


def test_a_job_runs_only_on_the_types_it_accepts_while_faster_ones_are_free(clean, tmp_path, capsys):
    """convnet runs 9.6x faster on v100 than on k80 (examples/toy_throughputs.json), and
    every v100 is free: a types=k80 job still only ever runs on k80, a job submitted with
    -p p100,k80 only there; one naming a type the cluster lacks is held back, saying why."""
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    only_k80 = submit(cluster, tmp_path, "convnet", 1, 10, flags="types=k80")
    listed = submit(cluster, tmp_path, "convnet", 1, 10, extra=["--partition=p100,k80"])
    unknown = submit(cluster, tmp_path, "convnet", 1, 10, flags="types=a100,k80")
    assert cluster.run(["squeue", "-h", "-j", listed, "-o", "%P"]).stdout.strip() == "p100,k80"
    daemon = start_daemon(config)
    try:
        deadline = time.time() + 120
        # done: the job printed its last line (a completed job soon leaves squeue)
        while any("done at" not in _read(tmp_path / f"out-{j}.txt") for j in (only_k80, listed)):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            assert time.time() < deadline, (queue(cluster), (tmp_path / "gavel.db").exists())
            time.sleep(1)
        assert queue(cluster).get(unknown) == "PENDING"
        assert gqueue(["--db", str(tmp_path / "gavel.db"), "--json", "--states", "all"]) == 0
        rows = {r["jobid"]: r for r in json.loads(capsys.readouterr().out)["jobs"]}
        assert gqueue(["--db", str(tmp_path / "gavel.db"), "-o", "jobid,st,types,reason"]) == 0
        table = capsys.readouterr().out.splitlines()
        assert gqueue(["--db", str(tmp_path / "gavel.db"), "-j", only_k80, "--explain"]) == 0
        explained = capsys.readouterr().out
    finally:
        code, log = stop_daemon(daemon)
    assert code == 0, log[-3000:]
    assert [p for p, _ in segments(tmp_path, only_k80)] == ["k80"], log[-3000:]
    assert {p for p, _ in segments(tmp_path, listed)} <= {"p100", "k80"}, log[-3000:]
    assert segments(tmp_path, listed), log[-3000:]
    for job in (only_k80, listed):
        out = (tmp_path / f"out-{job}.txt").read_text()
        assert "partition=v100" not in out, out
    # gqueue shows where each may run, and why the third waits
    why = "types=a100,k80: unknown GPU type a100 (this cluster has k80, p100, v100)"
    assert rows[unknown]["st"] == "W" and why in rows[unknown]["reason"], rows[unknown]
    assert table[0].split()[:3] == ["JOBID", "ST", "TYPES"]
    line = next(line for line in table if line.split()[0] == unknown)
    assert why in line
    assert "job %s is not planned: %s" % (unknown, why) in log
    assert rows[only_k80]["types"] == ["k80"] and rows[listed]["types"] == ["k80", "p100"]
    assert "  may run on k80 only" in explained.splitlines(), explained


def test_an_unknown_type_is_refused_at_sbatch_when_the_plugin_lists_the_types(clean, tmp_path):
    """The administrator's edit of job_submit.lua (GAVEL_GPU_TYPES), on the real slurmctld:
    it reloads the script when its modification time changes."""
    import os
    cluster = clean
    lua = cluster.directory / "job_submit.lua"
    original = lua.read_text()
    assert original.count("local GAVEL_GPU_TYPES = nil\n") == 1
    stat = lua.stat()
    try:
        lua.write_text(original.replace("local GAVEL_GPU_TYPES = nil\n",
                                        'local GAVEL_GPU_TYPES = { "v100", "p100", "k80" }\n'))
        os.utime(lua, (stat.st_atime, stat.st_mtime + 5))
        refused = cluster.run(["sbatch", "--comment", "gavel model=convnet types=a100,k80",
                               "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true"], check=False)
        accepted = cluster.run(["sbatch", "--parsable", "--comment", "gavel types=k80,v100",
                                "--gres=gpu:1", "-o", "/dev/null", "--wrap", "true"], check=False)
    finally:
        lua.write_text(original)
        os.utime(lua, (stat.st_atime, stat.st_mtime + 10))
    assert refused.returncode != 0
    assert ("gavel flags: types=a100,k80: unknown GPU type a100 (this cluster has k80, p100, v100)"
            in refused.stderr), refused.stderr
    assert accepted.returncode == 0, accepted.stderr
    job = accepted.stdout.strip().split(";")[0]
    shown = cluster.run(["scontrol", "show", "job", job]).stdout
    assert re.search(r"AdminComment=gavel:v1 weight=1( entity=\S+)? types=k80,v100\s", shown), shown


def test_a_constraint_on_node_features_keeps_the_job_on_those_types(clean, tmp_path):
    """Nodes carrying a feature per GPU type (set here at run time, as `Features=` in
    slurm.conf would): --constraint="p100|k80" never runs on the faster, free v100s, and
    is not first planned there (no start Slurm refuses, no backoff)."""
    cluster = clean
    nodes = {t: f"{t}-[0-1]" for t in ("v100", "p100", "k80")}
    try:
        for t, names in nodes.items():
            cluster.run(["scontrol", "update", f"nodename={names}", f"availablefeatures={t}",
                         f"activefeatures={t}"])
        config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
        job = submit(cluster, tmp_path, "convnet", 1, 8, extra=["--constraint=p100|k80"])
        daemon = start_daemon(config)
        try:
            deadline = time.time() + 90
            while "done at" not in _read(tmp_path / f"out-{job}.txt"):
                assert daemon.poll() is None, daemon.communicate()[0][-3000:]
                assert time.time() < deadline, queue(cluster)
                time.sleep(1)
        finally:
            code, log = stop_daemon(daemon)
    finally:
        for names in nodes.values():
            cluster.run(["scontrol", "update", f"nodename={names}", "activefeatures=",
                         "availablefeatures="], check=False)
    assert code == 0, log[-3000:]
    ran = [p for p, _ in segments(tmp_path, job)]
    assert ran and set(ran) <= {"p100", "k80"}, (ran, log[-3000:])
    assert "did not start" not in log and "started on v100" not in log, log[-3000:]
