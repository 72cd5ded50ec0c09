"""A progress directory another user owns (they made `.gavel/` first in a shared directory):
the job writes nothing there and says so on stderr, its training goes on; the daemon trusts
no file in it and says why.  Real files, directories and owners (the tests run as root;
the other user is `nobody`).  A directory of root's is the admin's: trusted by both sides."""
from __future__ import annotations

import os

import pytest

from slurm_gavel.job.iterator import GavelIterator
from slurm_gavel.job.progress import ProgressDirRefused, append_record, read_progress
from slurm_gavel.slurm.userfiles import UnsafeFile, UserFiles, read_tail

NOBODY = 65534

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")


def foreign_gavel_dir(tmp_path, mode=0o777):
    """`<shared>/.gavel` made by another user, writable by all (the hostile case: the
    victim's writes would succeed, and its owner could rename or delete them)."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    d = shared / ".gavel"
    d.mkdir()
    os.chmod(d, mode)
    os.chown(d, NOBODY, NOBODY)
    return shared, d


@needs_root
def test_the_job_writes_no_record_into_a_directory_another_user_owns(tmp_path):
    _, d = foreign_gavel_dir(tmp_path)
    with pytest.raises(ProgressDirRefused, match=r"\.gavel is owned by another user \(uid 65534\)"):
        append_record(d / "7.jsonl", {"event": "start"})
    assert not (d / "7.jsonl").exists()


@needs_root
def test_a_symlink_or_a_file_of_someone_else_is_never_written(tmp_path):
    d = tmp_path / "own"
    d.mkdir()
    target = tmp_path / "victim.txt"
    target.write_text("mine\n")
    os.symlink(target, d / "7.jsonl")
    with pytest.raises(ProgressDirRefused, match="symlink"):
        append_record(d / "7.jsonl", {"event": "start"})
    assert target.read_text() == "mine\n"
    (d / "8.jsonl").write_text("")
    os.chown(d / "8.jsonl", NOBODY, NOBODY)
    with pytest.raises(ProgressDirRefused, match="owned by another user"):
        append_record(d / "8.jsonl", {"event": "start"})
    assert (d / "8.jsonl").read_text() == ""
    os.mkfifo(d / "9.jsonl")                 # no reader: refused at once, never blocks
    with pytest.raises(OSError):
        append_record(d / "9.jsonl", {"event": "start"})


def test_own_and_new_directories_still_work(tmp_path):
    append_record(tmp_path / "new" / ".gavel" / "7.jsonl", {"event": "start", "step": 0})
    append_record(tmp_path / "new" / ".gavel" / "7.jsonl", {"event": "done", "step": 3})
    assert [r["event"] for r in read_progress(tmp_path / "new" / ".gavel" / "7.jsonl")] == ["start", "done"]


@needs_root
def test_the_iterator_says_so_on_stderr_and_trains_on(tmp_path, monkeypatch, capsys):
    shared, d = foreign_gavel_dir(tmp_path)
    for k in list(os.environ):
        if k.startswith(("SLURM_", "GAVEL_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(shared))
    monkeypatch.setenv("GAVEL_CHECKPOINT_DIR", str(tmp_path / "ckpt"))
    it = GavelIterator(range(5), None, None, total_steps=5, progress_interval=0)
    assert list(it) == [0, 1, 2, 3, 4]
    err = capsys.readouterr().err
    assert err.count("gavel: ") == 1, err            # said once, not at every record
    assert f"{d} is owned by another user (uid 65534)" in err, err
    assert "no progress reports" in err and "training goes on" in err, err
    assert list(d.iterdir()) == []


@needs_root
def test_the_daemon_trusts_no_file_in_a_directory_another_user_owns(tmp_path):
    _, d = foreign_gavel_dir(tmp_path)
    # even a file of the job's user (root here): the directory's owner can rename,
    # replace or delete it at will
    (d / "7.jsonl").write_text('{"event": "progress", "step": 5}\n')
    with pytest.raises(UnsafeFile, match=r"\.gavel is owned by another user \(uid 65534\)"):
        read_tail(d / "7.jsonl", owner_uid=0)
    # and when the job could write nothing there, the reason is kept for gqueue
    files = UserFiles(timeout=5)
    assert files.read_all({str(d / "8.jsonl"): {"owner_uid": 0}}) == {}
    assert "is owned by another user" in files.refused[str(d / "8.jsonl")]
    # the admin's spool (root's, or configured: trusted_dir) is not the user's own
    assert read_tail(d / "7.jsonl", owner_uid=0, trusted_dir=True).data


@needs_root
def test_a_spool_named_on_purpose_may_be_a_service_accounts(tmp_path, monkeypatch):
    # GAVEL_PROGRESS_DIR: a spool every job writes to (mode 1777), owned by a service account
    spool = tmp_path / "spool"
    spool.mkdir()
    os.chmod(spool, 0o1777)
    os.chown(spool, NOBODY, NOBODY)
    monkeypatch.setenv("GAVEL_PROGRESS_DIR", str(spool))
    append_record(spool / "7.jsonl", {"event": "start"})
    assert read_progress(spool / "7.jsonl") == [{"event": "start"}]
    (spool / "8.jsonl").write_text("")           # another user's file in it: never written
    os.chown(spool / "8.jsonl", NOBODY, NOBODY)
    with pytest.raises(ProgressDirRefused, match="owned by another user"):
        append_record(spool / "8.jsonl", {"event": "start"})


@needs_root
def test_no_checkpoint_is_kept_or_loaded_where_another_user_could_swap_it(tmp_path, monkeypatch):
    """The default checkpoint directory lies under `.gavel`: under another user's, a resumed
    job would load their file (pickle: their code) as its own. The iterator and the HF helper
    refuse it at the start with what to do; a symlinked `<jobid>.ckpt` likewise; GAVEL_CHECKPOINT_DIR
    (the user's own choice) or a `.gavel` of the user's own works."""
    from slurm_gavel.job import hf
    from slurm_gavel.job.progress import CheckpointDirRefused, default_checkpoint_dir
    shared, d = foreign_gavel_dir(tmp_path)
    for k in list(os.environ):
        if k.startswith(("SLURM_", "GAVEL_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    monkeypatch.setenv("SLURM_SUBMIT_DIR", str(shared))
    with pytest.raises(CheckpointDirRefused, match=r"\.gavel is owned by another user \(uid 65534\): "
                       r"a checkpoint there could be replaced .* set GAVEL_CHECKPOINT_DIR"):
        GavelIterator(range(5), None, None, total_steps=5, progress_interval=0)
    with pytest.raises(CheckpointDirRefused):
        hf.checkpoint_dir()
    assert list(d.iterdir()) == []

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / ".gavel").mkdir()
    (mine / ".gavel" / "78.ckpt").symlink_to(d)
    with pytest.raises(CheckpointDirRefused, match="78.ckpt is a symlink"):
        default_checkpoint_dir("78", {"SLURM_SUBMIT_DIR": str(mine)})
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert default_checkpoint_dir("78", {"SLURM_SUBMIT_DIR": str(fresh)}) == fresh / ".gavel" / "78.ckpt"
    assert (fresh / ".gavel").is_dir()
    assert default_checkpoint_dir("78", {"SLURM_SUBMIT_DIR": str(shared), "GAVEL_CHECKPOINT_DIR":
                                         str(tmp_path / "ck")}) == tmp_path / "ck" / "78"
