"""GavelCallback without Slurm: the Trainer example (examples/hf/train.py) under a fake job
environment, stopped by real USR2 signals (early, mid-epoch, at an epoch boundary), each
run exiting 85 and the next resuming, ends bitwise where an uninterrupted run ends."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.support.torch_import import import_torch

from slurm_gavel.job import hf
from slurm_gavel.job.progress import read_progress

torch = import_torch()
ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "hf"
STEPS = 20          # 96 samples / batch 8 = 12 steps an epoch

# The example, with a callback that sends the process USR2 after chosen steps.
DRIVER = f"""
import os, signal, sys
sys.path.insert(0, {str(EXAMPLE)!r})
import train                       # its first lines: catch_signal_early()
from transformers import TrainerCallback

class SignalAt(TrainerCallback):
    def __init__(self, steps):
        self.steps = steps
    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step in self.steps:
            os.kill(os.getpid(), signal.SIGUSR2)

at = {{int(s) for s in os.environ.get("SIGNAL_AT", "").split(",") if s}}
train.main(sys.argv[1:], [SignalAt(at)])
"""


def job_env(tmp_path, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", **extra)
    if "SLURM_JOB_ID" in extra:
        env.update(SLURM_SUBMIT_DIR=str(tmp_path), GAVEL_PROGRESS_INTERVAL="0")
    return env


def start(tmp_path, env, *args) -> subprocess.Popen:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    return subprocess.Popen([sys.executable, str(driver), *args], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def catches_usr2(pid: int) -> bool:
    """Whether process `pid` has a handler for SIGUSR2 (its SigCgt mask)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(mask >> (signal.SIGUSR2 - 1) & 1)


def finish(proc, timeout=240) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def test_importing_hf_does_not_import_transformers():
    code = "import sys, slurm_gavel.job.hf; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(ROOT)), check=True).stdout
    assert out.strip() == "False"


def test_resume_checkpoint_takes_the_newest_complete_one(tmp_path):
    assert hf.resume_checkpoint(tmp_path / "missing") is None
    assert hf.resume_checkpoint(tmp_path) is None
    for step in (3, 5, 6, 7, 9):
        (tmp_path / f"checkpoint-{step}").mkdir()
    (tmp_path / "checkpoint-3" / hf.TRAINER_STATE).write_text('{"global_step": 3}')
    (tmp_path / "checkpoint-5" / hf.TRAINER_STATE).write_text('{"global_step": 5}')
    (tmp_path / "checkpoint-6" / hf.TRAINER_STATE).write_text('{"global_step": 6}')
    (tmp_path / "checkpoint-6" / hf.JIT_INCOMPLETE).write_text("in progress")
    (tmp_path / "checkpoint-7" / hf.TRAINER_STATE).write_text('{"global_st')      # torn
    (tmp_path / "checkpoint-10").write_text("a file, not a checkpoint")
    assert hf.resume_checkpoint(tmp_path) == str(tmp_path / "checkpoint-5")
    assert [s for s, _ in hf.complete_checkpoints(tmp_path)] == [3, 5]


@pytest.mark.parametrize("setting, message", [
    ({"save_only_model": True}, "save_only_model"),
    ({"ignore_data_skip": True}, "ignore_data_skip"),
    ({"enable_jit_checkpoint": True, "signal": "TERM"}, "enable_jit_checkpoint")])
def test_settings_that_cannot_resume_exactly_are_refused(tmp_path, setting, message):
    from transformers import TrainerControl, TrainerState, TrainingArguments
    setting = dict(setting)
    callback = hf.GavelCallback(signal_name=setting.pop("signal", "USR2"))
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, **setting)
    with pytest.raises(ValueError, match=message):
        callback.on_train_begin(args, TrainerState(), TrainerControl())
    fine = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True,
                             enable_jit_checkpoint=True)     # JIT on TERM, gavel on USR2: apart
    callback.signum = signal.SIGUSR2
    callback.on_train_begin(fine, TrainerState(), TrainerControl())


def test_trainer_preempted_three_times_resumes_bitwise(tmp_path):
    out_dir = tmp_path / "out"
    common = ["--output-dir", str(out_dir), "--steps", str(STEPS)]
    ref = start(tmp_path, job_env(tmp_path), "--output-dir", str(tmp_path / "ref-out"),
                "--steps", str(STEPS), "--save-final", str(tmp_path / "ref.pt"))
    env = job_env(tmp_path, SLURM_JOB_ID="4242")

    # 1: the signal comes while the script is still setting up (after catch_signal_early)
    proc = start(tmp_path, env, *common)
    deadline = time.monotonic() + 300
    while not catches_usr2(proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, "never caught USR2"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGUSR2)
    code, log = finish(proc)
    assert code == 85, log[-3000:]
    # 2: mid-epoch; 3: at the end of the first epoch (step 12)
    for at in (4, 11):
        code, log = finish(start(tmp_path, dict(env, SIGNAL_AT=str(at)), *common))
        assert code == 85, log[-3000:]
        assert f"checkpoint of step {at + 1} saved" in log
    assert [s for s, _ in hf.complete_checkpoints(out_dir)] == [1, 5, 12]
    state = json.loads((out_dir / "checkpoint-12" / hf.TRAINER_STATE).read_text())
    assert state["global_step"] == 12 and state["epoch"] == 1.0
    # 4: to the end
    code, log = finish(start(tmp_path, env, *common, "--save-final", str(tmp_path / "final.pt")))
    assert code == 0, log[-3000:]
    code, ref_log = finish(ref)
    assert code == 0, ref_log[-3000:]

    records = read_progress(tmp_path / ".gavel" / "4242.jsonl")
    assert [(r["event"], r["step"]) for r in records if r["event"] != "progress"] == [
        ("start", 0), ("checkpoint", 1), ("start", 1), ("checkpoint", 5), ("start", 5),
        ("checkpoint", 12), ("start", 12), ("done", STEPS)]
    assert all(r["total_steps"] == STEPS for r in records)
    assert any(r["event"] == "progress" and r["steps_per_second"] for r in records)
    assert hf.complete_checkpoints(out_dir) == []          # removed when done
    assert not (tmp_path / "ref-out").exists() or not any((tmp_path / "ref-out").iterdir())

    final = torch.load(tmp_path / "final.pt", weights_only=False)
    ref_state = torch.load(tmp_path / "ref.pt", weights_only=False)
    assert [e["step"] for e in final["log"]] == list(range(1, STEPS + 1))
    assert final["log"] == ref_state["log"], "logged losses differ from the uninterrupted run"
    assert final["params"].keys() == ref_state["params"].keys()
    for name, value in final["params"].items():
        assert torch.equal(value, ref_state["params"][name]), name


def launch_two_ranks(tmp_path, env, port, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "slurm_gavel.job.accelerate", "launch", "--multi_gpu",
                             "--num_processes", "2", "--num_machines", "1", "--mixed_precision", "no",
                             "--dynamo_backend", "no", "--main_process_port", str(port),
                             str(EXAMPLE / "train.py"), "--steps", "12", *args],
                            env=env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def test_two_trainer_ranks_under_the_launch_wrapper_stop_together_and_resume_bitwise(tmp_path):
    port = 29000 + (os.getpid() + 300) % 900
    ref = launch_two_ranks(tmp_path, job_env(tmp_path), port + 50, "--output-dir",
                           str(tmp_path / "ref-out"), "--save-final", str(tmp_path / "ref.pt"))
    env = job_env(tmp_path, SLURM_JOB_ID="4343")
    out_dir = str(tmp_path / "out")
    progress = tmp_path / ".gavel" / "4343.jsonl"
    proc = launch_two_ranks(tmp_path, env, port, "--output-dir", out_dir, "--slow", "0.3")
    deadline = time.monotonic() + 300
    while not any(r["event"] == "progress" and r["step"] >= 3 for r in read_progress(progress)):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stdout.read()[-4000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR2)
    out1, _ = proc.communicate(timeout=300)
    assert proc.returncode == 85, out1[-4000:]
    [checkpoint] = [r for r in read_progress(progress) if r["event"] == "checkpoint"]
    assert 3 <= checkpoint["step"] < 12 and checkpoint["world_size"] == 2
    saved = Path(out_dir) / f"checkpoint-{checkpoint['step']}"
    assert (saved / "rng_state_0.pth").exists() and (saved / "rng_state_1.pth").exists()

    proc = launch_two_ranks(tmp_path, env, port + 1, "--output-dir", out_dir, "--save-final",
                            str(tmp_path / "final.pt"))
    out2, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, out2[-4000:]
    ref_out, _ = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_out[-4000:]
    final = torch.load(tmp_path / "final.pt", weights_only=False)
    reference = torch.load(tmp_path / "ref.pt", weights_only=False)
    assert [e["step"] for e in final["log"]] == list(range(1, 13))
    assert final["log"] == reference["log"]
    for name, value in final["params"].items():
        assert torch.equal(value, reference["params"][name]), name
