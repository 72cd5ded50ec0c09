"""The Hugging Face Trainer example on the real local cluster: preempted three times with the
daemon's own signal call, moved between GPU types, bitwise the uninterrupted result.

examples/hf/train.sbatch (a 2-layer BERT from a config, dropout, shuffling, a linear LR
schedule; slowed a little so that signals land mid-run) is submitted as a gavel job
(held by job_submit.lua), released on v100, preempted with `SlurmCLI.signal` (scancel
--batch --signal=USR2), requeued held by exit 85, moved to k80, p100, v100 and released
again each time; every logged loss and the final parameters equal those of an
uninterrupted run of the same script without Slurm.
"""
from __future__ import annotations

import subprocess
import sys

from tests.support.torch_import import import_torch
from tests.support.training import (ROOT, assert_same_tensors, assert_stopped_and_resumed, plain_env,
                                    run_moved, submit, two_past_the_last_stop)

torch = import_torch()
EXAMPLE = ROOT / "examples" / "hf"
STEPS = 40            # 12 steps an epoch
PARTITIONS = ("v100", "k80", "p100", "v100")     # submitted to v100, then moved
OFFLINE = dict(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")


def job_script(tmp_path, script_args: str):
    text = (EXAMPLE / "train.sbatch").read_text()
    text = text.replace("exec python examples/hf/train.py",
                        f"exec {sys.executable} {EXAMPLE / 'train.py'}")
    assert script_args and text.rstrip().endswith('"$@"')
    script = tmp_path / "job.sbatch"
    script.write_text(text.rstrip().removesuffix('"$@"') + script_args + "\n")
    return script


def test_trainer_job_preempted_three_times_and_moved_resumes_bitwise(slurm_cluster, tmp_path):
    cluster = slurm_cluster
    ref = subprocess.Popen([sys.executable, str(EXAMPLE / "train.py"), "--output-dir",
                            str(tmp_path / "ref-out"), "--steps", str(STEPS), "--save-final",
                            str(tmp_path / "ref.pt")], env=plain_env(**OFFLINE), cwd=tmp_path,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    script = job_script(tmp_path, f" --slow 0.15 --save-final {tmp_path / 'final.pt'}")
    job = submit(cluster, script, dict(PYTHONPATH=ROOT, OMP_NUM_THREADS=1, **OFFLINE, GAVEL_PROGRESS_INTERVAL=0),
                 options=["-p", "v100"])
    progress = tmp_path / ".gavel" / f"{job}.jsonl"
    log_path = tmp_path / f"gavel-hf-{job}.out"
    info, stops = run_moved(cluster, job, PARTITIONS, progress, log_path,
                            two_past_the_last_stop, kill=[ref])
    log = log_path.read_text()
    assert info["JobState"] == "COMPLETED", log[-4000:]
    ref_out, _ = ref.communicate(timeout=300)
    assert ref.returncode == 0, ref_out[-3000:]

    assert_stopped_and_resumed(progress, PARTITIONS, stops, STEPS, 12, log)
    assert not list((tmp_path / ".gavel" / f"{job}.ckpt").glob("checkpoint-*"))   # removed when done

    final = torch.load(tmp_path / "final.pt", weights_only=False)
    reference = torch.load(tmp_path / "ref.pt", weights_only=False)
    assert [e["step"] for e in final["log"]] == list(range(1, STEPS + 1))
    assert final["log"] == reference["log"], "logged losses differ from the uninterrupted run"
    assert_same_tensors(final["params"], reference["params"])
