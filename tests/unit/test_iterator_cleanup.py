"""When a job is done the iterator removes its checkpoints (they are only for resuming),
unless asked to keep them; what it did not write stays."""
from __future__ import annotations

import os

import pytest

from slurm_gavel.job.iterator import GavelIterator, list_checkpoints


@pytest.fixture
def job(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "GAVEL_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "91")
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run(directory, stop_at=None, **kw):
    seen = []

    def save(path):
        with open(path, "w") as f:
            f.write(repr(seen))

    def load(path):
        with open(path) as f:
            seen[:] = eval(f.read())

    it = GavelIterator(list(range(10)), load, save, checkpoint_dir=directory, total_steps=10, **kw)
    try:
        for x in it:
            seen.append(x)
            if stop_at is not None and x == stop_at:
                it.request_stop()
    except SystemExit as e:
        assert e.code == 85
        return None
    finally:
        it.close()
    return seen


def test_done_removes_the_checkpoints_it_wrote(job):
    ckpt = job / "ckpt"
    assert run(ckpt, stop_at=4) is None
    assert list_checkpoints(ckpt)                    # preempted: the checkpoint is there
    (ckpt / "notes.txt").write_text("the user's own file")
    assert run(ckpt) == list(range(10))              # resumed and finished
    assert list_checkpoints(ckpt) == []
    assert sorted(os.listdir(ckpt)) == ["notes.txt"]  # what it did not write stays


def test_the_default_directory_is_removed_when_empty(job):
    assert run(None, stop_at=2) is None
    default = job / ".gavel" / "91.ckpt"
    assert default.is_dir()
    assert run(None) == list(range(10))
    assert not default.exists()


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_keep_final_checkpoint(job, monkeypatch, how):
    ckpt = job / "ckpt"
    assert run(ckpt, stop_at=4) is None
    if how == "environment":
        monkeypatch.setenv("GAVEL_KEEP_CHECKPOINTS", "1")
        assert run(ckpt) == list(range(10))
    else:
        assert run(ckpt, keep_final_checkpoint=True) == list(range(10))
    assert [s for s, _ in list_checkpoints(ckpt)] == [5]
