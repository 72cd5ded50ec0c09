"""GavelCallback without Slurm: the example script (examples/lightning/train.py) run as a
subprocess under a fake job environment, stopped by a real SIGUSR2 (sent by the test, or
by the process to itself at a chosen step), exiting 85 and resuming bit for bit.

Each run imports Lightning (seconds on a busy machine): the runs are few and short.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.support.torch_import import import_torch

torch = import_torch()
pytest.importorskip("lightning")
pytest.importorskip("torchdata")

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "lightning"
STEPS = 80                 # 4 epochs of 20 batches (the example's defaults)

# Runs the example; a callback after GavelCallback sends SIGUSR2 to the process itself
# at the start of the steps in KILL_AT (a real signal, at a known step).
DRIVER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, sys.argv[1])
    import train                      # its first lines catch the preemption signal
    print("imported", flush=True)
    import lightning.pytorch as L
    if os.environ.get("PLAIN_LOADER"):
        import torch
        train.StatefulDataLoader = torch.utils.data.DataLoader
    if os.environ.get("UNSIZED_LOADER"):
        import torch
        Stateful = train.StatefulDataLoader

        class Unsized(torch.utils.data.IterableDataset):
            def __init__(self, data):
                self.data = data
            def __iter__(self):
                return iter(self.data)
        train.StatefulDataLoader = lambda data, batch_size, shuffle: Stateful(Unsized(data), batch_size)
    if os.environ.get("WRAPPED_SHARDS"):
        # DDP as Lightning does it by default: its wrapper around the loader's own shuffle
        Trainer = L.Trainer
        train.L.Trainer = lambda *a, **k: Trainer(*a, **{**k, "use_distributed_sampler": True})
        train.ShardedData.train_dataloader = lambda self: train.StatefulDataLoader(
            self.dataset, batch_size=self.batch_size, shuffle=True)
    if os.environ.get("FORGET_RESUME"):
        train.GavelCallback.resume_path = lambda self: None
    KILL_AT = {int(s) for s in os.environ.get("KILL_AT", "").split(",") if s}

    class Kill(L.Callback):
        def on_train_start(self, trainer, *a):
            env = trainer._accelerator_connector.cluster_environment
            print("environment", type(env).__name__, getattr(env, "auto_requeue", None), flush=True)

        def on_train_batch_start(self, trainer, *a):
            if trainer.global_step + 1 in KILL_AT:
                os.kill(os.getpid(), signal.SIGUSR2)
    train.main(sys.argv[2:], extra_callbacks=[Kill()])
""")


def _env(tmp_path, job="7", **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    if job:
        env.update(SLURM_JOB_ID=job, GAVEL_CHECKPOINT_DIR=str(tmp_path / "ck"),
                   GAVEL_PROGRESS_DIR=str(tmp_path / "progress"), GAVEL_PROGRESS_INTERVAL="0")
    env.update(extra)
    return env


def _run(tmp_path, env, *args, timeout=300) -> subprocess.CompletedProcess:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    return subprocess.run([sys.executable, str(driver), str(EXAMPLE), *args], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout)


def _steps(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("step ")]


def _records(tmp_path, job="7") -> list[dict]:
    path = tmp_path / "progress" / f"{job}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_the_module_imports_without_lightning():
    code = ("import sys; sys.modules['lightning'] = sys.modules['pytorch_lightning'] = None\n"
            "import slurm_gavel.job.lightning as m\n"
            "m.catch_signal_early()\n"
            "try:\n    m.GavelCallback()\nexcept ImportError as e:\n    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], env=_env(None, job=None), capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "refused: GavelCallback needs lightning.pytorch or pytorch_lightning" in done.stdout


def test_stops_after_the_epoch_end_and_mid_epoch_then_resumes_bit_for_bit(tmp_path):
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    ref = _run(ref_dir, _env(ref_dir, job=None), "--save-final", str(ref_dir / "final.pt"))
    assert ref.returncode == 0, ref.stderr[-3000:]
    assert len(_steps(ref.stdout)) == STEPS and not (ref_dir / "ck").exists()

    # The signal comes during step 20, the last of epoch 0: Lightning cannot resume exactly
    # from there, so the callback stops after step 21. Then mid-epoch, after step 33.
    # SLURM_NTASKS makes Lightning pick its SLURMEnvironment (auto-requeue on by default).
    env = _env(tmp_path, KILL_AT="20,33", SLURM_NTASKS="1", SLURM_PROCID="0", SLURM_LOCALID="0",
               SLURM_NODEID="0", SLURM_JOB_NAME="unit")
    codes, out = [], ""
    for restart in range(4):
        env["SLURM_RESTART_COUNT"] = str(restart)
        run = _run(tmp_path, env, "--save-final", str(tmp_path / "final.pt"))
        codes.append(run.returncode)
        out += run.stdout
        assert run.returncode in (0, 85), run.stderr[-3000:]
        if run.returncode == 0:
            break
        assert "exiting 85 (requeue held)" in run.stderr
    assert codes == [85, 85, 0]
    assert _steps(out) == _steps(ref.stdout)              # every loss and LR, as hex floats
    final, expected = torch.load(tmp_path / "final.pt"), torch.load(ref_dir / "final.pt")
    assert final.keys() == expected.keys() and all(torch.equal(final[k], expected[k]) for k in final)
    assert "environment SLURMEnvironment False" in out      # Lightning's auto-requeue turned off

    records = _records(tmp_path)
    assert [(r["event"], r["step"], r["restart"]) for r in records if r["event"] != "progress"] == [
        ("start", 0, 0), ("checkpoint", 21, 0), ("start", 21, 1), ("checkpoint", 33, 1),
        ("start", 33, 2), ("done", STEPS, 2)]
    progress = [r["step"] for r in records if r["event"] == "progress"]
    assert progress and progress == sorted(progress) and set(progress) <= set(range(1, STEPS + 1))
    assert all(r["total_steps"] == STEPS and r["job"] == "7" for r in records)
    assert all(r["steps_per_second"] > 0 for r in records if r["event"] in ("progress", "checkpoint"))
    assert all(r["save_seconds"] >= 0 for r in records if r["event"] == "checkpoint")
    assert not (tmp_path / "ck" / "7").exists()             # removed once training is done


def test_a_signal_during_setup_is_kept_and_a_forgotten_resume_is_refused(tmp_path):
    env = _env(tmp_path)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.Popen([sys.executable, str(driver), str(EXAMPLE)], env=env, cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "imported"
        proc.send_signal(signal.SIGUSR2)         # while Lightning and the model are set up
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 85, err[-3000:]
    assert len(_steps(out)) == 1 and "checkpoint of step 1 saved" in err
    assert [(r["event"], r["step"]) for r in _records(tmp_path)] == [("start", 0), ("checkpoint", 1)]
    assert sorted(os.listdir(tmp_path / "ck" / "7")) == ["step-000000000001"]

    forgot = _run(tmp_path, _env(tmp_path, FORGET_RESUME="1"))
    assert forgot.returncode == 1
    assert "did not resume from it: pass ckpt_path=gavel.resume_path() to trainer.fit" in forgot.stderr
    assert not _steps(forgot.stdout)


def test_loaders_that_cannot_resume_exactly_are_refused(tmp_path):
    run = _run(tmp_path, _env(tmp_path, PLAIN_LOADER="1"))
    assert run.returncode == 1
    assert "the training loader (DataLoader) cannot tell its position" in run.stderr
    assert "use torchdata.stateful_dataloader.StatefulDataLoader" in run.stderr
    assert not _steps(run.stdout)
    run = _run(tmp_path, _env(tmp_path, UNSIZED_LOADER="1"))
    assert run.returncode == 1
    assert "the training loader (StatefulDataLoader) has no length, so Lightning fetches a batch " \
        "ahead" in run.stderr
    assert not _steps(run.stdout)


def test_ddp_resumes_bit_for_bit_and_lightnings_own_shard_wrapper_is_refused(tmp_path):
    """Two ranks (Lightning's own launcher, gloo on the CPU): stopped in epochs 0 and 2, the
    run is the uninterrupted one; the same job with Lightning's DistributedSamplerWrapper
    around a shuffling loader (a new order after a restart) is refused before any step."""
    reference = _run(tmp_path, _env(tmp_path, job=""), "--devices", "2")
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert len(_steps(reference.stdout)) == 40               # 4 epochs of 10 batches a rank
    runs = [_run(tmp_path, _env(tmp_path, KILL_AT=kill), "--devices", "2") for kill in ("5", "25", "")]
    assert [r.returncode for r in runs] == [85, 85, 0], runs[-1].stderr[-3000:]
    assert [s for r in runs for s in _steps(r.stdout)] == _steps(reference.stdout)
    other = tmp_path / "wrapped"
    other.mkdir()
    wrapped = _run(other, _env(other, WRAPPED_SHARDS="1"), "--devices", "2")
    assert wrapped.returncode != 0
    assert "Lightning splits the training loader's RandomSampler with its DistributedSamplerWrapper" \
        in wrapped.stderr
    assert "StatefulDistributedSampler" in wrapped.stderr
    assert not _steps(wrapped.stdout)


PL_SCRIPT = textwrap.dedent("""
    from slurm_gavel.job.lightning import GavelCallback, catch_signal_early
    catch_signal_early()
    import os, signal, sys
    import pytorch_lightning as pl
    import torch
    from torchdata.stateful_dataloader import StatefulDataLoader

    class Model(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
        def training_step(self, batch, batch_idx):
            loss = self.layer(batch[0]).pow(2).mean()
            print(f"step {self.global_step + 1} loss {loss.item().hex()}", flush=True)
            if self.global_step + 1 == int(os.environ.get("KILL_AT", 0)):
                os.kill(os.getpid(), signal.SIGUSR2)
            return loss
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    pl.seed_everything(0, verbose=False)
    data = torch.utils.data.TensorDataset(torch.randn(64, 4))
    gavel = GavelCallback()
    assert isinstance(gavel, pl.Callback)
    trainer = pl.Trainer(max_steps=6, accelerator="cpu", logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[gavel])
    trainer.fit(Model(), StatefulDataLoader(data, batch_size=4, shuffle=True),
                ckpt_path=gavel.resume_path())
""")


def test_pytorch_lightning_the_package_works_too(tmp_path):
    pytest.importorskip("pytorch_lightning")
    script = tmp_path / "pl_train.py"
    script.write_text(PL_SCRIPT)
    env = _env(tmp_path, KILL_AT="3")
    first = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=300)
    assert first.returncode == 85, first.stderr[-3000:]
    second = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    steps = [line.split()[1] for line in _steps(first.stdout) + _steps(second.stdout)]
    assert steps == ["1", "2", "3", "4", "5", "6"]
    assert [(r["event"], r["step"]) for r in _records(tmp_path) if r["event"] != "progress"] == \
        [("start", 0), ("checkpoint", 3), ("start", 3), ("done", 6)]


def test_off_slurm_nothing_is_caught(tmp_path):
    """Without SLURM_JOB_ID the signal keeps its default action: nothing changes a laptop run."""
    code = ("import signal, slurm_gavel.job.lightning as m\n"
            "m.catch_signal_early()\n"
            "print(signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL)\n")
    done = subprocess.run([sys.executable, "-c", code], env=_env(tmp_path, job=None),
                          capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "True", done.stderr
