"""slurm_gavel.slurm.userfiles: the daemon reads users' progress files without blocking,
without following symlinks, within a size bound -- on real files, FIFOs and devices."""
from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from slurm_gavel.job.progress import append_record, parse_records, summary
from slurm_gavel.slurm import userfiles
from slurm_gavel.slurm.userfiles import TAIL_BYTES, UnsafeFile, UserFiles, read_tail

NOBODY = 65534


def gavel_dir(tmp_path):
    d = tmp_path / "work" / ".gavel"
    d.mkdir(parents=True)
    return d


def record(step, partition="v100"):
    return {"event": "progress", "step": step, "partition": partition, "steps_per_second": 2.0}


def test_a_regular_file_is_read_and_its_records_parsed(tmp_path):
    d = gavel_dir(tmp_path)
    append_record(d / "7.jsonl", record(5))
    append_record(d / "7.jsonl", record(6))
    tail = read_tail(d / "7.jsonl", owner_uid=os.getuid())
    assert not tail.truncated
    assert [r["step"] for r in parse_records(tail.data)] == [5, 6]
    assert read_tail(d / "8.jsonl") is None                       # none yet
    assert read_tail(tmp_path / "nowhere" / ".gavel" / "8.jsonl") is None


def test_a_fifo_is_refused_without_blocking(tmp_path):
    d = gavel_dir(tmp_path)
    os.mkfifo(d / "7.jsonl")
    began = time.monotonic()
    with pytest.raises(UnsafeFile, match="FIFO"):
        read_tail(d / "7.jsonl")
    assert time.monotonic() - began < 1.0


def test_a_symlink_to_a_root_only_file_is_never_followed(tmp_path):
    d = gavel_dir(tmp_path)
    os.symlink("/etc/shadow", d / "7.jsonl")
    with pytest.raises(UnsafeFile, match="symlink") as e:
        read_tail(d / "7.jsonl")
    assert "root:" not in str(e.value)
    # the same for the directory: .gavel pointing at a root-only place
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (secret / "7.jsonl").write_text('{"event": "progress", "step": 99, "partition": "v100"}\n')
    work = tmp_path / "work2"
    work.mkdir()
    os.symlink(secret, work / ".gavel")
    with pytest.raises(UnsafeFile, match="symlink"):
        read_tail(work / ".gavel" / "7.jsonl")
    # .gavel itself a FIFO: refused at once too
    fifo_dir = tmp_path / "work3"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / ".gavel")
    began = time.monotonic()
    with pytest.raises(UnsafeFile, match="not a directory"):
        read_tail(fifo_dir / ".gavel" / "7.jsonl")
    assert time.monotonic() - began < 1.0
    # the admin's configured spool may be reached through a symlink; its files may not
    os.symlink(secret, tmp_path / "spool")
    assert parse_records(read_tail(tmp_path / "spool" / "7.jsonl", trusted_dir=True).data)[0]["step"] == 99


def test_a_file_of_someone_else_is_refused(tmp_path):
    """A work dir component swapped for a symlink to root's files still reaches root-owned
    files: they are not the job user's, so they are refused."""
    d = gavel_dir(tmp_path)
    append_record(d / "7.jsonl", record(5))
    with pytest.raises(UnsafeFile, match="owned by uid"):
        read_tail(d / "7.jsonl", owner_uid=NOBODY)
    os.chown(d / "7.jsonl", NOBODY, NOBODY)
    assert read_tail(d / "7.jsonl", owner_uid=NOBODY).data


def test_dev_zero_a_directory_and_a_socket_are_refused(tmp_path):
    import socket
    d = gavel_dir(tmp_path)
    os.symlink("/dev/zero", d / "1.jsonl")
    (d / "2.jsonl").mkdir()
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(d / "3.jsonl"))
    try:
        for name, why in (("1", "symlink"), ("2", "directory"), ("3", "socket")):
            with pytest.raises(UnsafeFile, match=why):
                read_tail(d / f"{name}.jsonl")
    finally:
        s.close()


def test_a_huge_file_costs_one_bounded_read_and_still_gives_the_latest_record(tmp_path):
    d = gavel_dir(tmp_path)
    path = d / "7.jsonl"
    with open(path, "wb") as f:
        f.truncate(8 << 30)                  # 8 GiB, sparse: read whole it would not fit
        f.seek(0, 2)
        f.write(b"junk without newline" * 10 + b"\n")
    append_record(path, record(41))
    append_record(path, record(42))
    began = time.monotonic()
    tail = read_tail(path)
    assert time.monotonic() - began < 1.0
    assert tail.truncated and len(tail.data) == TAIL_BYTES
    records = parse_records(tail.data, torn_start=True)
    assert [r["step"] for r in records] == [41, 42]
    assert summary(records)["step"] == 42


def test_infinity_and_nan_are_not_records():
    data = (b'{"event": "progress", "step": 3, "steps_per_second": Infinity}\n'
            b'{"event": "progress", "step": NaN}\n{"event": "progress", "step": 2}\n')
    assert parse_records(data) == [{"event": "progress", "step": 2}]


@pytest.mark.parametrize("swap", ["fifo", "symlink"])
def test_a_file_swapped_between_the_look_and_the_open_is_refused(tmp_path, monkeypatch, swap):
    """The race: a regular file at lstat, a FIFO (or a symlink to /etc/shadow) at open.
    The swap is made, for real, just before the daemon's open()."""
    d = gavel_dir(tmp_path)
    path = d / "7.jsonl"
    append_record(path, record(5))
    real_open = os.open

    def open_after_swap(name, flags, *args, **kw):
        if name == path.name and kw.get("dir_fd") is not None:
            os.unlink(path)
            os.mkfifo(path) if swap == "fifo" else os.symlink("/etc/shadow", path)
        return real_open(name, flags, *args, **kw)

    monkeypatch.setattr(userfiles.os, "open", open_after_swap)
    began = time.monotonic()
    with pytest.raises(UnsafeFile, match="FIFO" if swap == "fifo" else "symlink"):
        read_tail(path)
    assert time.monotonic() - began < 1.0


def test_a_read_that_hangs_costs_only_the_timeout_and_is_not_started_again(tmp_path, monkeypatch, caplog):
    """A hung filesystem (here: a read made to wait on an event) delays the round by at
    most the timeout; the next round does not wait for it again; it is logged once."""
    d = gavel_dir(tmp_path)
    append_record(d / "1.jsonl", record(1))
    append_record(d / "2.jsonl", record(2))
    release = threading.Event()
    calls = []
    real = userfiles.read_tail

    def hanging(path, **kw):
        calls.append(str(path))
        if str(path).endswith("2.jsonl"):
            release.wait(30)
        return real(path, **kw)

    monkeypatch.setattr(userfiles, "read_tail", hanging)
    files = UserFiles(timeout=0.5)
    paths = {str(d / "1.jsonl"): {}, str(d / "2.jsonl"): {}}
    with caplog.at_level(logging.WARNING, logger="slurm_gavel.userfiles"):
        began = time.monotonic()
        got = files.read_all(paths)
        assert time.monotonic() - began < 1.5
        assert list(got) == [str(d / "1.jsonl")]
        began = time.monotonic()
        got = files.read_all(paths)
        assert time.monotonic() - began < 1.0 and list(got) == [str(d / "1.jsonl")]
        assert calls.count(str(d / "2.jsonl")) == 1              # not piled up
        release.set()
        time.sleep(0.2)
        assert sorted(files.read_all(paths)) == sorted(paths)
    hung = [r for r in caplog.records if "not read within" in r.getMessage()]
    assert len(hung) == 1


def test_a_refused_file_is_logged_once_per_period_with_its_name_escaped(tmp_path, caplog):
    d = gavel_dir(tmp_path)
    evil = d / "7\x1b]0;owned\x07.jsonl"
    os.mkfifo(evil)
    now = [0.0]
    files = UserFiles(log_every=600, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="slurm_gavel.userfiles"):
        for t in (0, 10, 20, 700):
            now[0] = t
            assert files.read_all({str(evil): {}}) == {}
    lines = [r.getMessage() for r in caplog.records if r.name == "slurm_gavel.userfiles"]
    assert len(lines) == 2
    assert all("\x1b" not in line and "\x07" not in line and "\\x1b" in line for line in lines)


def test_many_files_are_read_by_a_few_threads(tmp_path, monkeypatch):
    """A round of 200 files runs at most `workers` reads at once (once a thread per file)."""
    d = gavel_dir(tmp_path)
    paths = {}
    for i in range(200):
        append_record(d / f"{i}.jsonl", record(i))
        paths[str(d / f"{i}.jsonl")] = {}
    real = userfiles.read_tail
    lock, now, most = threading.Lock(), [0], [0]

    def counted(path, **kw):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            time.sleep(0.001)
            return real(path, **kw)
        finally:
            with lock:
                now[0] -= 1
    monkeypatch.setattr(userfiles, "read_tail", counted)
    before = threading.active_count()
    files = UserFiles(timeout=5, workers=4)
    got = files.read_all(paths)
    assert sorted(got) == sorted(paths) and all(got.values())
    assert most[0] <= 4, most[0]
    assert threading.active_count() - before <= 4


def test_hung_reads_do_not_starve_the_other_files(tmp_path, monkeypatch):
    """As many hung reads as workers: the next round's other files are still read (a worker
    stuck past the timeout is replaced), and the hung ones are not started again."""
    d = gavel_dir(tmp_path)
    for i in range(6):
        append_record(d / f"{i}.jsonl", record(i))
    release = threading.Event()
    calls = []
    real = userfiles.read_tail

    def hanging(path, **kw):
        calls.append(str(path))
        if str(path).endswith(("0.jsonl", "1.jsonl")):
            release.wait(30)
        return real(path, **kw)
    monkeypatch.setattr(userfiles, "read_tail", hanging)
    files = UserFiles(timeout=0.3, workers=2)
    hung = {str(d / "0.jsonl"): {}, str(d / "1.jsonl"): {}}
    assert files.read_all(hung) == {}
    others = {str(d / f"{i}.jsonl"): {} for i in range(2, 6)}
    began = time.monotonic()
    got = files.read_all({**hung, **others})
    assert time.monotonic() - began < 1.0
    assert sorted(got) == sorted(others)
    assert calls.count(str(d / "0.jsonl")) == 1 and calls.count(str(d / "1.jsonl")) == 1
    release.set()
