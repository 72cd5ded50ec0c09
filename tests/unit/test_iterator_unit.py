"""GavelIterator in-process, on plain Python data (no torch): pass-through, epochs,
checkpoint files, request_stop, progress records. The torch runs are in test_iterator.py."""
from __future__ import annotations

import os
import signal

import pytest

from slurm_gavel.job.iterator import (GavelIterator, catch_signal_early, checkpoint_name,
                                      list_checkpoints, signal_number, state_name)
from slurm_gavel.job.progress import read_progress


class Loader:
    """Batches 0..n-1 of epoch e are (e, i); records set_epoch calls."""

    def __init__(self, n=3):
        self.n, self.epoch, self.epochs = n, 0, []

    def set_epoch(self, e):
        self.epoch = e
        self.epochs.append(e)

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter([(self.epoch, i) for i in range(self.n)])


class State:
    """The "model": the batches trained on; save/load write and read them."""

    def __init__(self):
        self.seen, self.loaded = [], []

    def save(self, path):
        with open(path, "w") as f:
            f.write(repr(self.seen))

    def load(self, path):
        self.loaded.append(path)
        with open(path) as f:
            self.seen = eval(f.read())


@pytest.fixture
def no_slurm(monkeypatch, tmp_path):
    for k in list(os.environ):
        if k.startswith(("SLURM_", "GAVEL_")):
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def slurm(no_slurm, monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(no_slurm))
    monkeypatch.setenv("SLURM_JOB_PARTITION", "k80")
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    before = signal.getsignal(signal.SIGUSR2)
    yield no_slurm
    signal.signal(signal.SIGUSR2, before)


def test_without_slurm_a_pass_through(no_slurm):
    before = signal.getsignal(signal.SIGUSR2)
    state = State()
    it = GavelIterator([10, 20, 30], state.load, state.save)
    assert list(it) == [10, 20, 30] and it.step == 3 and it.total_steps == 3
    assert not it.managed and it.checkpoint_dir is None and it.progress_path is None
    assert signal.getsignal(signal.SIGUSR2) is before           # no handler installed
    assert os.listdir(no_slurm) == [] and state.loaded == []   # no files, nothing loaded
    with pytest.raises(RuntimeError, match="all 3 steps are done"):
        next(it)                                               # asking after the end: an error


def test_without_slurm_total_steps_over_epochs_and_a_generator(no_slurm):
    loader = Loader(3)
    it = GavelIterator(loader, None, None, total_steps=7)
    assert list(it) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (2, 0)]
    assert loader.epochs == [0, 1, 2]
    gen = GavelIterator((i for i in range(4)), None, None)       # no length: until exhausted
    assert gen.total_steps is None and list(gen) == [0, 1, 2, 3]


def test_without_slurm_loads_a_given_checkpoint_and_resumes_at_its_step(no_slurm):
    ckpt = no_slurm / "ckpt"
    ckpt.mkdir()
    (ckpt / checkpoint_name(2)).write_text("['old']")
    (ckpt / checkpoint_name(4)).write_text("['a', 'b', 'c', 'd']")
    (ckpt / ".step-000000000005.tmp-99").write_text("torn")
    state, loader = State(), Loader(3)
    it = GavelIterator(loader, state.load, state.save, checkpoint_dir=ckpt, total_steps=7)
    assert state.loaded == [str(ckpt / checkpoint_name(4))] and it.start_step == it.step == 4
    assert not (ckpt / ".step-000000000005.tmp-99").exists()      # torn temporaries are removed
    assert list(it) == [(1, 1), (1, 2), (2, 0)]                    # step 4 = epoch 1, batch 1
    assert loader.epochs == [1, 2]
    it.checkpoint()                                                # on request, off Slurm too
    assert [s for s, _ in list_checkpoints(ckpt)] == [7]


def test_a_failed_save_keeps_the_previous_checkpoint(no_slurm):
    ckpt = no_slurm / "ckpt"
    state = State()
    it = GavelIterator([1, 2, 3], state.load, state.save, checkpoint_dir=ckpt)
    next(it)
    it.checkpoint()

    def broken(path):
        with open(path, "w") as f:
            f.write("half")
        raise OSError("no space left")
    it.save_checkpoint = broken
    next(it)
    with pytest.raises(OSError, match="no space"):
        it.checkpoint()
    # the checkpoint and the iterator's state of step 1; nothing of step 2
    assert sorted(os.listdir(ckpt)) == [checkpoint_name(1), state_name(1, 0)]
    it.save_checkpoint = lambda path: None                        # "saved" nothing
    with pytest.raises(RuntimeError, match="without writing"):
        it.checkpoint()
    assert sorted(os.listdir(ckpt)) == [checkpoint_name(1), state_name(1, 0)]


def test_directory_checkpoints_and_keep(no_slurm):
    ckpt = no_slurm / "ckpt"

    def save(path):
        os.mkdir(path)
        with open(os.path.join(path, "weights"), "w") as f:
            f.write("w")
    it = GavelIterator(range(10), None, save, checkpoint_dir=ckpt, keep_checkpoints=2)
    for _ in range(3):
        next(it)
        it.checkpoint()
    it.checkpoint()                                # the same step again: the existing one stays
    assert sorted(os.listdir(ckpt)) == [checkpoint_name(2), state_name(2, 0),
                                        checkpoint_name(3), state_name(3, 0)]
    assert (ckpt / checkpoint_name(3) / "weights").read_text() == "w"


def test_under_slurm_request_stop_saves_records_and_exits_85(slurm):
    state, loader = State(), Loader(4)
    it = GavelIterator(loader, state.load, state.save, total_steps=10, progress_interval=0)
    assert it.managed and it.checkpoint_dir == slurm / ".gavel" / "77.ckpt"
    assert signal.getsignal(signal.SIGUSR2) == it._on_signal
    for batch in it:
        state.seen.append(batch)
        if it.step == 3:
            os.kill(os.getpid(), signal.SIGUSR2)        # only sets the flag
            assert it._flag
            break
    with pytest.raises(SystemExit) as stop:
        next(it)
    assert stop.value.code == 85
    assert [s for s, _ in list_checkpoints(it.checkpoint_dir)] == [3]
    records = read_progress(slurm / ".gavel" / "77.jsonl")
    assert [r["event"] for r in records] == ["start", "progress", "progress", "checkpoint"]
    assert records[-1]["step"] == 3 and records[-1]["partition"] == "k80"
    assert all(r["restart"] == 2 and r["job"] == "77" for r in records)

    # the next start resumes where it stopped and finishes
    again, loader2 = State(), Loader(4)
    it2 = GavelIterator(loader2, again.load, again.save, total_steps=10)
    assert again.seen == [(0, 0), (0, 1), (0, 2)] and it2.step == 3
    rest = list(it2)
    assert again.seen + rest == [(e, i) for e in range(3) for i in range(4)][:10]
    assert read_progress(slurm / ".gavel" / "77.jsonl")[-1]["event"] == "done"
    os.kill(os.getpid(), signal.SIGUSR2)                # after the end: ignored, not fatal
    it2.close()


def test_progress_is_throttled(slurm):
    it = GavelIterator(range(50), None, None, total_steps=50, progress_interval=3600,
                       checkpoint_dir=slurm / "c")
    assert len(list(it)) == 50
    records = read_progress(it.progress_path)
    assert [r["event"] for r in records] == ["start", "done"]
    assert records[0]["steps_per_second"] is None and records[1]["steps_per_second"] > 0
    it.close()


def test_env_progress_and_checkpoint_dirs(slurm, monkeypatch, tmp_path):
    monkeypatch.setenv("GAVEL_PROGRESS_DIR", str(tmp_path / "spool"))
    monkeypatch.setenv("GAVEL_CHECKPOINT_DIR", str(tmp_path / "ckpts"))
    it = GavelIterator([1], None, None, progress=True)
    assert it.progress_path == tmp_path / "spool" / "77.jsonl"
    assert it.checkpoint_dir == tmp_path / "ckpts" / "77"
    assert list(it) == [1]
    assert [r["event"] for r in read_progress(it.progress_path)] == ["start", "done"]
    it.close()
    quiet = GavelIterator([1], None, None, progress=False)
    assert quiet.progress_path is None
    quiet.close()


def test_bad_arguments():
    with pytest.raises(ValueError):
        GavelIterator([1], None, None, total_steps=-1)
    with pytest.raises(ValueError):
        GavelIterator([1], None, None, sync_every=0)
    assert signal_number("USR2") == signal_number("SIGUSR2") == signal.SIGUSR2 == signal_number(12)
    with pytest.raises(ValueError):
        signal_number("NOPE")


def test_a_signal_during_setup_is_remembered(slurm):
    catch_signal_early("USR2")
    os.kill(os.getpid(), signal.SIGUSR2)               # while "building the model"
    it = GavelIterator(range(5), None, lambda p: open(p, "w").close(), total_steps=5)
    with pytest.raises(SystemExit) as stop:
        next(it)
    assert stop.value.code == 85 and [s for s, _ in list_checkpoints(it.checkpoint_dir)] == [0]
    it.close()


def test_catch_signal_early_does_nothing_without_slurm(no_slurm):
    before = signal.getsignal(signal.SIGUSR2)
    catch_signal_early()
    assert signal.getsignal(signal.SIGUSR2) is before
