"""A node's CPUs (or memory) all taken: the daemon plans jobs only where Slurm can start them,
and says why one waits. The case the CPU and memory cluster tests share: a plain job on 1 GPU
and all of p100-0, a gavel job on 1 GPU and all of a k80 node, four 1-GPU jobs on k80 only
and five on p100 only, under the daemon."""
from __future__ import annotations

import time

from slurm_gavel.daemon.store import SqliteStore
from tests.support.daemon import explain, gqueue, start_daemon, stop_daemon, submit, write_config
from tests.support.slurm import only, running


def plan_around_a_full_node(cluster, tmp_path, whole_node: list[str], reason: str, words: str) -> str:
    """Run the case on `cluster` (2 nodes of p100 and of k80, 4 GPUs each) and check it:
    `whole_node`, the sbatch options that ask all of a node (its CPUs, its memory); `reason`,
    what gqueue's reason for a waiting p100 job has once it names that; `words`, what gqueue and
    explain must say. Returns the daemon's log."""
    config = write_config(tmp_path, cluster, round_seconds=6, tick_seconds=1)
    config.write_text(config.read_text() + "start_timeout_seconds = 8\n")
    # a plain job on 1 GPU and all of p100-0: no GPU there is free for anyone
    plain = cluster.run(["sbatch", "--parsable", "-o", "/dev/null", "-p", "p100", "-w", "p100-0", *whole_node,
                         "--gres=gpu:1", "--wrap", "sleep 600"]).stdout.strip()
    # a gavel job on 1 GPU and all of a k80 node, and four 1-GPU jobs of other users'
    # kind on k80 only: they fit the other k80 node exactly
    heavy = submit(cluster, tmp_path, "convnet", 1, 100000, extra=[*whole_node, *only(cluster, "k80")])
    light_k80 = [submit(cluster, tmp_path, "convnet", 1, 100000, extra=only(cluster, "k80")) for _ in range(4)]
    # five 1-GPU jobs on p100 only: four fit p100-1, one waits
    light_p100 = [submit(cluster, tmp_path, "convnet", 1, 100000, extra=only(cluster, "p100")) for _ in range(5)]
    ours = [heavy, *light_k80, *light_p100]
    daemon = start_daemon(config)
    samples, seen, explained = [], set(), []
    try:
        deadline = time.time() + 60
        while time.time() < deadline and not (heavy in running(cluster)
                                              and sum(j in running(cluster) for j in light_k80) == 4):
            assert daemon.poll() is None, daemon.communicate()[0][-3000:]
            time.sleep(1)
        end = time.time() + 30          # five rounds (and, until explain said why one waits, 60 s more)
        while time.time() < end or time.time() < end + 60 and not any(words in e for e in explained):
            ran = running(cluster)
            samples.append(ran)
            for row in gqueue(tmp_path).values():
                if row["jobid"] in light_p100 and row["st"] != "R":
                    seen.add(row.get("reason") or "")
                    # (it may start between gqueue and explain: asked again while it waits)
                    if reason in (row.get("reason") or "") and not any(words in e for e in explained):
                        explained.append(explain(tmp_path, row["jobid"]))
            time.sleep(1)
    finally:
        code, log = stop_daemon(daemon)
        cluster.run(["scancel", plain, *ours], check=False)
    assert code == 0, log[-3000:]
    store = SqliteStore(tmp_path / "gavel.db")
    stuck = [e for e in store.events(ours) if e["kind"] in ("stuck", "start_taken")]
    # never released where Slurm could not start it (it would wait "Resources" and back off)
    assert not stuck, (stuck, log[-4000:])
    assert not [line for line in log.splitlines() if "release" in line and "nodes p100-0" in line], log[-4000:]
    assert samples
    for ran in samples:
        assert ran.get(plain) == "p100-0"
        # nothing of ours on p100-0; the k80 node of the heavy job, while it runs, is its own
        assert not [j for j in ours if ran.get(j) == "p100-0"], ran
        if heavy in ran:
            assert not [j for j in light_k80 if ran.get(j) == ran[heavy]], ran
    # the GPUs Slurm can use stay busy: p100-1 (4 of the p100 jobs) and both k80 nodes
    busy = [sum(j in ran for j in light_p100) for ran in samples]
    assert sum(busy) >= 0.8 * 4 * len(samples), busy
    assert any(words in w for w in seen), seen
    assert any(words in e for e in explained), explained
    return log
