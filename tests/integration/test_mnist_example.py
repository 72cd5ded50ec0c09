"""examples/mnist: pytorch/examples' MNIST with the README's change, preempted for real.

The script runs on the CPU on random MNIST-shaped data (--fake-data), shuffled,
printing every loss exactly (float.hex). One run is uninterrupted; the other is
sent SIGUSR2 three times (it must exit 85 each time and be started again, as Slurm
would), then ends. Every loss, every evaluation line and the final parameters
must be the same, bitwise.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.torch_import import import_torch  # noqa: E402

torch = import_torch()

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mnist"
ARGS = ["--no-accel", "--fake-data", "128", "--batch-size", "16", "--test-batch-size", "32",
        "--epochs", "3", "--shuffle", "--print-losses", "--log-interval", "3", "--save-model"]
STEPS = 3 * 128 // 16


def start(run_dir: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", SLURM_JOB_ID="4242",
               SLURM_SUBMIT_DIR=str(run_dir), GAVEL_CHECKPOINT_DIR=str(run_dir / "ckpt"),
               GAVEL_PROGRESS_DIR=str(run_dir / "progress"))
    return subprocess.Popen([sys.executable, str(EXAMPLE / "main.py"), *ARGS], cwd=run_dir,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def output(lines) -> tuple[list[str], list[str]]:
    losses = [line.split()[1] for line in lines if line.startswith("loss ")]
    tests = [line for line in lines if line.startswith("Test set")]
    return losses, tests


def run_preempted(run_dir: Path, stops=(4, 4, 4)) -> tuple[list[str], list[str], list[int]]:
    """Start the job, signal it after `stops[i]` new losses of start i; again until exit 0."""
    lines, codes = [], []
    for new_losses in (*stops, None):
        proc = start(run_dir)
        seen = 0
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("loss ") and new_losses is not None:
                seen += 1
                if seen == new_losses:
                    proc.send_signal(signal.SIGUSR2)
        err = proc.stderr.read()
        codes.append(proc.wait(timeout=300))
        assert codes[-1] in (0, 85), err
        if codes[-1] == 0:
            break
    losses, tests = output(lines)
    return losses, tests, codes


def test_mnist_preempted_three_times_equals_the_uninterrupted_run(tmp_path):
    plain_dir, stopped_dir = tmp_path / "plain", tmp_path / "stopped"
    plain_dir.mkdir()
    stopped_dir.mkdir()
    plain = start(plain_dir)              # runs alongside the preempted one
    losses, tests, codes = run_preempted(stopped_dir)
    out, err = plain.communicate(timeout=600)
    assert plain.returncode == 0, err
    plain_losses, plain_tests = output(out.splitlines(keepends=True))

    assert codes == [85, 85, 85, 0]
    assert len(plain_losses) == STEPS and len(plain_tests) == 3
    assert losses == plain_losses          # every step once, the same loss bitwise
    assert tests == plain_tests            # every epoch's evaluation once, the same
    a = torch.load(plain_dir / "mnist_cnn.pt")
    b = torch.load(stopped_dir / "mnist_cnn.pt")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def changed_lines(a: Path, b: Path) -> int:
    diff = subprocess.run(["diff", "-u", str(a), str(b)], capture_output=True, text=True)
    return len([line for line in diff.stdout.splitlines() if re.match(r"[+-][^+-]", line)])


@pytest.mark.skipif(shutil.which("diff") is None, reason="needs diff")
def test_the_line_counts_the_docs_claim_are_measured():
    recipe = changed_lines(EXAMPLE / "upstream_main.py", EXAMPLE / "preemptible_main.py")
    harness = changed_lines(EXAMPLE / "preemptible_main.py", EXAMPLE / "main.py")
    assert recipe == 9
    readme = (ROOT / "README.md").read_text()
    assert f"{recipe} changed lines" in readme
    assert f"{recipe} changed lines" in (EXAMPLE / "README.md").read_text()
    assert f"{harness} more" in (EXAMPLE / "README.md").read_text()
