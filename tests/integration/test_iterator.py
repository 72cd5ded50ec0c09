"""GavelIterator with real torch training in subprocesses: signals, exit 85, exact resume.

tests/jobs/tiny_train.py is the training script (seeded CPU training with dropout
and momentum, data order a function of the epoch). A "job" here is that script
run with the environment Slurm gives a batch job (SLURM_JOB_ID, ...); the test
plays Slurm: it sends SIGUSR2 with os.kill, expects exit 85, and starts the job
again with SLURM_RESTART_COUNT + 1, until it exits 0.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.torch_import import import_torch

from slurm_gavel.job.iterator import list_checkpoints, state_name
from slurm_gavel.job.progress import read_progress

torch = import_torch()

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve().parents[1] / "jobs" / "tiny_train.py"
TOTAL = 40


def base_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "GAVEL_", "TINY_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", **extra)
    return env


def slurm_env(job_dir: Path, job_id="1001", restart=0, partition="v100", **extra) -> dict:
    extra.setdefault("TINY_SLEEP", "0.04")         # room for the test to signal mid-run
    return base_env(SLURM_JOB_ID=job_id, SLURM_SUBMIT_DIR=str(job_dir), SLURM_RESTART_COUNT=str(restart),
                    SLURM_JOB_PARTITION=partition, SLURMD_NODENAME=f"{partition}-0",
                    GAVEL_PROGRESS_INTERVAL="0.1", **extra)


def log_lines(out: Path, rank=0) -> list[str]:
    path = out / f"batches-{rank}.log"
    return path.read_text().splitlines() if path.exists() else []


def start(out: Path, env: dict, total=TOTAL) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(SCRIPT), str(out), str(total)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def signal_after(proc: subprocess.Popen, out: Path, new_steps: int, rank=0, timeout=300):
    """Send SIGUSR2 once the job has logged `new_steps` more steps (its handler is in place)."""
    before = len(log_lines(out, rank))
    deadline = time.monotonic() + timeout
    while len(log_lines(out, rank)) < before + new_steps:
        assert proc.poll() is None, f"the job ended early: {proc.communicate()}"
        assert time.monotonic() < deadline, "the job did not get going"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGUSR2)


def finish(proc: subprocess.Popen, timeout=300) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def final(out: Path, rank=0) -> dict:
    return torch.load(out / f"final-{rank}.pt")


def assert_same_params(a: dict, b: dict):
    assert a.keys() == b.keys()
    for k, value in a.items():
        assert torch.equal(value, b[k]), f"{k} differs"


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run, without Slurm (the iterator is a pass-through)."""
    out = tmp_path_factory.mktemp("reference")
    code, err = finish(start(out, base_env()))
    assert code == 0, err
    assert not (out / ".gavel").exists() and "gavel:" not in err      # no checkpoint, no progress
    return out


def test_three_preemptions_end_bitwise_equal_to_an_uninterrupted_run(reference, tmp_path):
    stops = []
    for restart, partition in enumerate(("v100", "k80", "p100")):
        proc = start(tmp_path, slurm_env(tmp_path, restart=restart, partition=partition))
        signal_after(proc, tmp_path, new_steps=5)
        code, err = finish(proc)
        assert code == 85, err
        stops.append(len(log_lines(tmp_path)))
        assert f"checkpoint of step {stops[-1]} saved" in err
        assert [s for s, _ in list_checkpoints(tmp_path / ".gavel" / "1001.ckpt")] == [stops[-1]]
    code, err = finish(start(tmp_path, slurm_env(tmp_path, restart=3, partition="v100")))
    assert code == 0, err
    assert stops[0] < stops[1] < stops[2] < TOTAL

    ran, ref = final(tmp_path), final(reference)
    assert ran["step"] == ref["step"] == TOTAL and ran["start"] == stops[-1]
    assert_same_params(ran["params"], ref["params"])
    # The same batches in the same order, each exactly once: no replay, no skip.
    assert log_lines(tmp_path) == log_lines(reference)
    assert len(log_lines(tmp_path)) == TOTAL

    records = read_progress(tmp_path / ".gavel" / "1001.jsonl")
    starts = [r for r in records if r["event"] == "start"]
    checkpoints = [r for r in records if r["event"] == "checkpoint"]
    assert [r["step"] for r in starts] == [0, *stops]
    assert [r["restart"] for r in starts] == [0, 1, 2, 3]
    assert [r["partition"] for r in starts] == ["v100", "k80", "p100", "v100"]
    assert [r["step"] for r in checkpoints] == stops
    assert [r["event"] for r in records][-1] == "done" and records[-1]["step"] == TOTAL
    for r in records:
        assert r["job"] == "1001" and r["total_steps"] == TOTAL and r["node"].endswith("-0")
        if r["event"] != "start":
            assert r["steps_per_second"] > 0
    assert any(r["event"] == "progress" for r in records)
    assert all("load_seconds" in r for r in starts[1:]) and "load_seconds" not in starts[0]
    assert all(r["save_seconds"] >= 0 for r in checkpoints)
    # time lost to the stops, as the job reports it: never less, run after run, than its saves
    # plus each restart's start-up (Python, torch, the checkpoint's load), which takes a while
    lost = [r["lost_seconds"] for r in records]
    assert lost == sorted(lost) and lost[0] == 0
    for i, s in enumerate(starts[1:], 1):
        saves = sum(c["save_seconds"] for c in checkpoints[:i])
        assert s["lost_seconds"] >= saves + s["load_seconds"] and s["lost_seconds"] > saves + 0.05 * i


def test_a_signal_at_the_last_step_boundary_still_finishes(tmp_path):
    env = slurm_env(tmp_path, TINY_SLEEP="0.05")
    proc = start(tmp_path, env, total=6)
    signal_after(proc, tmp_path, new_steps=6)         # after the last step: done wins
    code, err = finish(proc)
    assert code == 0, err
    assert read_progress(tmp_path / ".gavel" / "1001.jsonl")[-1]["event"] == "done"


def test_crashes_while_saving_leave_the_previous_checkpoint(reference, tmp_path):
    """Killed in the middle of writing (SIGKILL), then a save that raises: each time the
    previous checkpoint stays the newest, loads, and the run resumes from it exactly."""
    ckpt_dir = tmp_path / ".gavel" / "1001.ckpt"
    proc = start(tmp_path, slurm_env(tmp_path))
    signal_after(proc, tmp_path, new_steps=5)
    code, err = finish(proc)
    assert code == 85, err
    saved = len(log_lines(tmp_path))
    good = f"step-{saved:012d}"

    proc = start(tmp_path, slurm_env(tmp_path, restart=1, TINY_CRASH_IN_SAVE="kill"))
    signal_after(proc, tmp_path, new_steps=5)
    code, err = finish(proc)
    assert code == -signal.SIGKILL, err
    torn = [p for p in ckpt_dir.iterdir() if p.name.startswith(".step-")]
    assert len(torn) == 1 and torn[0].read_bytes() == b"half a checkpoint"
    assert [s for s, _ in list_checkpoints(ckpt_dir)] == [saved]
    torch.load(ckpt_dir / good)                               # the previous checkpoint loads

    proc = start(tmp_path, slurm_env(tmp_path, restart=2, TINY_CRASH_IN_SAVE="raise"))
    signal_after(proc, tmp_path, new_steps=5)
    code, err = finish(proc)
    assert code == 1 and "disk full (simulated)" in err       # the job fails, no requeue
    assert f"resumed from {ckpt_dir / good}" in err
    # torn file cleaned, tmp gone; the iterator's state of the good checkpoint stays
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [good, state_name(saved, 0)]

    code, err = finish(start(tmp_path, slurm_env(tmp_path, restart=3)))
    assert code == 0, err
    assert f"resumed from {ckpt_dir / good}" in err
    ran = final(tmp_path)
    assert ran["start"] == saved and ran["step"] == TOTAL
    assert_same_params(ran["params"], final(reference)["params"])
    starts = [r for r in read_progress(tmp_path / ".gavel" / "1001.jsonl") if r["event"] == "start"]
    assert [r["step"] for r in starts] == [0, saved, saved, saved]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_pair(out: Path, env_of) -> list[subprocess.Popen]:
    port = str(free_port())
    return [start(out, env_of(rank, {"WORLD_SIZE": "2", "RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                                           "MASTER_PORT": port}))
            for rank in (0, 1)]


def test_two_gloo_ranks_stop_at_the_same_step_when_only_rank_1_is_signalled(tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    procs = start_pair(reference, lambda rank, d: base_env(**d))
    assert [finish(p)[0] for p in procs] == [0, 0]

    job = tmp_path / "job"
    job.mkdir()
    procs = start_pair(job, lambda rank, d: slurm_env(job, job_id="2002", **d))
    signal_after(procs[1], job, new_steps=4, rank=1)
    results = [finish(p) for p in procs]
    assert [code for code, _ in results] == [85, 85], results
    stop = len(log_lines(job, 0))
    assert len(log_lines(job, 1)) == stop                     # the same number of steps
    assert 4 <= stop < TOTAL
    assert [s for s, _ in list_checkpoints(job / ".gavel" / "2002.ckpt")] == [stop]
    assert "checkpoint of step" in results[0][1] and "checkpoint of step" not in results[1][1]
    records = read_progress(job / ".gavel" / "2002.jsonl")    # rank 0 writes, rank 1 does not
    assert [(r["event"], r["step"]) for r in records if r["event"] != "progress"] == \
        [("start", 0), ("checkpoint", stop)]
    assert all(r["world_size"] == 2 for r in records)

    procs = start_pair(job, lambda rank, d: slurm_env(job, job_id="2002", restart=1, **d))
    results = [finish(p) for p in procs]
    assert [code for code, _ in results] == [0, 0], results
    for rank in (0, 1):
        assert log_lines(job, rank) == log_lines(reference, rank)      # no batch replayed or skipped
        ran = final(job, rank)
        assert ran["start"] == stop and ran["step"] == TOTAL
        assert_same_params(ran["params"], final(reference, rank)["params"])
    assert_same_params(final(job, 0)["params"], final(job, 1)["params"])
