"""The Accelerate route without Slurm: `python -m slurm_gavel.job.accelerate launch` around
`accelerate launch` with two gloo ranks on the CPU (examples/accelerate/train.py) under a
fake job environment, preempted by USR2 to the wrapper (during the ranks' setup, then
mid-epoch), exits 85 with no rank left, and resumes bitwise; the wrapper's reaping with a
stand-in rank that leaves an orphan behind."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.torch_import import import_torch

from slurm_gavel.job import accelerate as gavel_accelerate
from slurm_gavel.job.progress import read_progress

torch = import_torch()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "accelerate" / "train.py"
STEPS = 16             # 96 samples / (2 ranks x 8) = 6 steps an epoch


def env_for(tmp_path, job: bool, **extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "GAVEL_", "RANK", "WORLD_SIZE", "MASTER_", "LOCAL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", **extra)
    if job:
        env.update(SLURM_JOB_ID="777", SLURM_SUBMIT_DIR=str(tmp_path), GAVEL_PROGRESS_INTERVAL="0")
    return env


def launch(tmp_path, env, port, *script_args) -> subprocess.Popen:
    command = [sys.executable, "-m", "slurm_gavel.job.accelerate", "launch", "--multi_gpu",
               "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
               "--dynamo_backend", "no", "--main_process_port", str(port), str(EXAMPLE), "--cpu",
               "--steps", str(STEPS), *script_args]
    return subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def descendants_alive(marker: str) -> list[int]:
    """Processes whose command line mentions `marker` (a path unique to the test)."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                state = next(line for line in Path(f"/proc/{entry}/status").read_text().splitlines()
                             if line.startswith("State:"))
            except (OSError, StopIteration):
                continue
            if marker in cmdline and "zombie" not in state:
                out.append(int(entry))
    return out


def catches(pid: int, signum: int) -> bool:
    return gavel_accelerate._catches(pid, signum)


def job_ranks_alive() -> list[int]:
    """The example's processes that run under the fake job (not the reference run)."""
    alive = []
    for pid in descendants_alive(str(EXAMPLE)):
        try:
            if b"SLURM_JOB_ID=777\0" in Path(f"/proc/{pid}/environ").read_bytes():
                alive.append(pid)
        except OSError:
            pass
    return alive


def losses(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("step ")]


def test_two_ranks_preempted_through_the_wrapper_resume_bitwise(tmp_path):
    port = 29000 + os.getpid() % 900
    ref = launch(tmp_path, env_for(tmp_path, job=False), port + 50,
                 "--save-final", str(tmp_path / "ref.pt"))
    env = env_for(tmp_path, job=True)
    progress = tmp_path / ".gavel" / "777.jsonl"

    # 1: USR2 to the wrapper as soon as it catches it, before the ranks do: held back,
    # then forwarded to each rank once that rank catches it
    proc = launch(tmp_path, env, port, "--slow", "0.2")
    deadline = time.monotonic() + 300
    while not catches(proc.pid, signal.SIGUSR2):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.01)
    proc.send_signal(signal.SIGUSR2)
    out1, _ = proc.communicate(timeout=300)
    assert proc.returncode == 85, out1[-4000:]
    assert job_ranks_alive() == []

    # 2: mid-epoch, once rank 0 reported step 4
    proc = launch(tmp_path, env, port + 1, "--slow", "0.2")
    deadline = time.monotonic() + 300
    while not any(r["event"] == "progress" and r["step"] >= 4 and r["restart"] == 0
                  for r in read_progress(progress)[2:]):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-4000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR2)
    out2, _ = proc.communicate(timeout=300)
    assert proc.returncode == 85, out2[-4000:]
    assert job_ranks_alive() == []

    # 3: to the end
    proc = launch(tmp_path, env, port + 2, "--save-final", str(tmp_path / "final.pt"))
    out3, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out3[-4000:]
    ref_out, _ = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_out[-4000:]

    records = read_progress(progress)
    events = [(r["event"], r["step"]) for r in records if r["event"] != "progress"]
    stop = events[3][1]
    assert events == [("start", 0), ("checkpoint", 0), ("start", 0), ("checkpoint", stop),
                      ("start", stop), ("done", STEPS)], events
    assert 4 < stop < STEPS and stop % 6, stop               # mid-epoch
    assert all(r["world_size"] == 2 for r in records)
    assert "checkpoint of step 0 saved" in out1 and f"checkpoint of step {stop} saved" in out2
    assert not list((tmp_path / ".gavel" / "777.ckpt").glob("step-*"))      # removed when done

    assert losses(out1) == [] and losses(out2 + out3) == losses(ref_out)
    assert len(losses(ref_out)) == STEPS
    final = torch.load(tmp_path / "final.pt")
    reference = torch.load(tmp_path / "ref.pt")
    assert final.keys() == reference.keys()
    for name, value in final.items():
        assert torch.equal(value, reference[name]), name


STAND_IN = """
import os, signal, subprocess, sys, time
flag = []
signal.signal(signal.SIGUSR2, lambda *a: flag.append(1))
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", {marker!r}],
                 start_new_session=True)                      # left behind
while not flag:
    time.sleep(0.05)
open(os.environ["GAVEL_REQUEUE_FILE"], "w").write("7\\n")
sys.exit(85)
"""


def test_the_wrapper_forwards_the_signal_exits_85_and_leaves_no_process(tmp_path):
    marker = str(tmp_path / "orphan-marker")
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN.format(marker=marker))
    env = env_for(tmp_path, job=False)
    proc = subprocess.Popen([sys.executable, "-m", "slurm_gavel.job.accelerate", "launch",
                             "--num_processes", "1", "--cpu", "--mixed_precision", "no",
                             "--dynamo_backend", "no", str(script)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not descendants_alive(marker):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR2)
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 85, out
    assert descendants_alive(marker) == []
    assert descendants_alive(str(script)) == []


def test_the_wrapper_passes_a_failure_on(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("import sys; sys.exit(3)\n")
    done = subprocess.run([sys.executable, "-m", "slurm_gavel.job.accelerate", "launch",
                           "--num_processes", "1", "--cpu", "--mixed_precision", "no",
                           "--dynamo_backend", "no", str(script)], env=env_for(tmp_path, job=False),
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode not in (0, 85), done.stderr
    assert subprocess.run([sys.executable, "-m", "slurm_gavel.job.accelerate"],
                          env=env_for(tmp_path, job=False), capture_output=True).returncode == 2


@pytest.mark.parametrize("shuffle_config, error", [(False, "use_seedable_sampler"), (True, None)])
def test_a_shuffled_loader_needs_the_seedable_sampler(tmp_path, shuffle_config, error):
    from accelerate import Accelerator, DataLoaderConfiguration
    from accelerate.state import AcceleratorState, GradientState
    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    accelerator = Accelerator(cpu=True, dataloader_config=DataLoaderConfiguration(
        use_seedable_sampler=shuffle_config))
    loader = accelerator.prepare(torch.utils.data.DataLoader(torch.arange(10), batch_size=2,
                                                             shuffle=True))
    if error:
        with pytest.raises(ValueError, match=error):
            gavel_accelerate.GavelAccelerateIterator(accelerator, loader, total_steps=3)
        return
    got = [b.tolist() for b in gavel_accelerate.GavelAccelerateIterator(accelerator, loader,
                                                                          total_steps=7)]
    expected = []
    for epoch in (0, 1):
        loader.set_epoch(epoch)
        expected += [b.tolist() for b in loader]
    assert got == expected[:7] and expected[:5] != expected[5:]


def test_the_wrapper_ends_everything_on_term(tmp_path):
    marker = str(tmp_path / "orphan-marker")
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN.format(marker=marker))
    proc = subprocess.Popen([sys.executable, "-m", "slurm_gavel.job.accelerate", "launch",
                             "--num_processes", "1", "--cpu", "--mixed_precision", "no",
                             "--dynamo_backend", "no", str(script)], env=env_for(tmp_path, job=False),
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 300
    while not descendants_alive(marker):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()
        time.sleep(0.1)
    proc.terminate()
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, out
    assert descendants_alive(marker) == [] and descendants_alive(str(script)) == []
