"""One daemon per database, and a daemon that survives its storage failing.

Real SQLite files on real failing file systems: a small tmpfs filled up (disk
full), remounted read-only, files made immutable (chattr +i), the database
and its directory deleted under a running daemon.  Where Slurm is involved the
daemon runs against the session's local cluster: while the database cannot
be written no job is released, held or signalled, and it resumes by itself.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm_gavel.daemon.store import SqliteStore, StoreUnwritable
from tests.support.daemon import LoggedDaemon, submit, write_config

ACTIONS = ("release:", "start on ", "hold:", "signal ", "requeuehold:")


def needs_root():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs of its own (unmounted in teardown)."""
    needs_root()
    mnt = tmp_path / "fs"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0755", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["chattr", "-R", "-i", str(mnt)], capture_output=True)
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(mnt: Path) -> Path:
    """Fill the file system to the last byte; the filler file, to remove to free space."""
    filler = mnt / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (65536, 4096, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def run_daemon(config: Path, *args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "slurm_gavel", "daemon", "--config", str(config), *args],
                          capture_output=True, text=True, timeout=timeout)


def wait_pid_in_lock(database: Path, pid: int, timeout: float = 30):
    lock = Path(str(database) + ".lock")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if lock.exists() and lock.read_text().strip() == str(pid):
            return
        time.sleep(0.2)
    pytest.fail(f"{lock} never held pid {pid}")


def state_of(cluster, job) -> tuple[str, str]:
    out = cluster.run(["squeue", "-h", "-j", job, "-o", "%T %r"]).stdout.split()
    return (out[0], out[1]) if len(out) > 1 else (out[0] if out else "GONE", "")


# -- one daemon per database ----------------------------------------------------------------
def test_a_second_daemon_on_the_same_database_exits_naming_the_first(clean, tmp_path):
    cluster = clean
    config = write_config(tmp_path, cluster, round_seconds=4, tick_seconds=1)
    first = LoggedDaemon(config, tmp_path / "first.log")
    try:
        first.wait_for(" kept, ")
        wait_pid_in_lock(tmp_path / "gavel.db", first.proc.pid)
        began = time.time()
        second = run_daemon(config)
        assert second.returncode == 3, second.stderr
        assert time.time() - began < 10                      # at once, no Slurm round first
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1 and f"pid {first.proc.pid}" in lines[0], second.stderr
        assert "in use by another slurm-gavel daemon" in lines[0]
        # a dry run on the live daemon's database: refused, told to use its own
        dry = run_daemon(config, "--dry-run", "--max-rounds", "1")
        assert dry.returncode == 3, dry.stderr
        line = dry.stderr.strip()
        assert len(line.splitlines()) == 1 and f"pid {first.proc.pid}" in line and "`database =`" in line
        # a dry run on its own database runs beside the live daemon
        own = tmp_path / "dry"
        own.mkdir()
        dry_config = write_config(own, cluster, round_seconds=2, tick_seconds=1)
        beside = run_daemon(dry_config, "--dry-run", "--max-rounds", "1")
        assert beside.returncode == 0, beside.stderr[-2000:]
        assert "DRY RUN" in beside.stderr
        assert first.proc.poll() is None
    finally:
        first.proc.kill()                                     # kill -9: no clean-up at all
        first.proc.wait()
        first.out.close()
    # the kernel dropped the lock with the process: the next daemon starts
    third = LoggedDaemon(config, tmp_path / "third.log")
    try:
        third.wait_for(" kept, ")
        wait_pid_in_lock(tmp_path / "gavel.db", third.proc.pid)
    finally:
        assert third.stop() == 0, third.log()[-3000:]


# -- read-only at start ---------------------------------------------------------------------
def test_a_read_only_database_at_start_is_one_line_and_exit_75(clean, tmp_path, small_fs):
    config = write_config(tmp_path, clean, database=str(small_fs / "gavel.db"))
    SqliteStore(small_fs / "gavel.db").close()                # a database from an earlier run
    (small_fs / "gavel.db.lock").write_text("")
    subprocess.run(["mount", "-o", "remount,ro", str(small_fs)], check=True)
    try:
        done = run_daemon(config)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(small_fs)], check=True)
    assert done.returncode == 75, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"database {small_fs / 'gavel.db'} is not writable" in lines[0] and "Read-only" in lines[0]
    # chattr +i on the database itself (the mount writable): same, no Bus error
    subprocess.run(["chattr", "+i", str(small_fs / "gavel.db")], check=True)
    try:
        done = run_daemon(config)
    finally:
        subprocess.run(["chattr", "-i", str(small_fs / "gavel.db")], check=True)
    assert done.returncode == 75, (done.returncode, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "immutable" in lines[0] and "chattr -i" in lines[0], done.stderr


# -- failing while running -----------------------------------------------------------------
def assert_no_action(log: str, since: int, until: int):
    acted = [line for line in log[since:until].splitlines() if any(a in line for a in ACTIONS)]
    assert not acted, acted


def test_disk_full_and_immutable_files_under_a_running_daemon(clean, tmp_path, small_fs):
    """Each failure: one line saying what to do, no Slurm action while it lasts (a job
    submitted meanwhile stays held), and the daemon resumes by itself once it is fixed."""
    cluster = clean
    db = small_fs / "gavel.db"
    config = write_config(tmp_path, cluster, database=str(db), round_seconds=3, tick_seconds=1)
    daemon = LoggedDaemon(config, tmp_path / "daemon.log")
    try:
        daemon.wait_for(" kept, ")
        first = submit(cluster, tmp_path, "convnet", 1, 60)
        daemon.wait_for(f"release: {first}")

        def outage(break_it, mend_it, says):
            before = len(daemon.log())
            break_it()
            job = submit(cluster, tmp_path, "convnet", 1, 4)       # the daemon must write to see it
            at = daemon.wait_for("is not writable", after=before)
            line = daemon.log()[at:].splitlines()[0]
            assert says in line and "resumes by itself" in line, line
            time.sleep(7)                                           # two rounds and more
            held = state_of(cluster, job)
            assert held[0] == "PENDING" and "JobHeld" in held[1], held   # never released
            failing = daemon.log()[at:]
            assert failing.count("is not writable") == 1, failing   # one line, not one per tick
            mend_it()
            back = daemon.wait_for("is writable again: resuming", after=at)
            assert_no_action(daemon.log(), before, back)
            daemon.wait_for(f"release: {job}", after=back)
            assert state_of(cluster, first)[0] == "RUNNING"          # nothing was preempted
            return job

        filler = []
        full = outage(lambda: filler.append(fill(small_fs)), lambda: filler[0].unlink(), "disk full; free space")
        # (a read-only remount is refused while the daemon has the file open for writing:
        # the kernel forces it only on errors; read-only at start is tested above)
        frozen = outage(lambda: subprocess.run(["chattr", "+i", str(db)], check=True),
                        lambda: subprocess.run(["chattr", "-i", str(db)], check=True),
                        "the file is immutable (chattr +i)")
        # the wal-index SQLite maps into memory: this was a Bus error (exit 135)
        shm = outage(lambda: subprocess.run(["chattr", "+i", f"{db}-shm"], check=True),
                     lambda: subprocess.run(["chattr", "-i", f"{db}-shm"], check=True),
                     "gavel.db-shm is immutable (chattr +i)")
        time.sleep(2)
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log()[-3000:]
    assert "Traceback" not in daemon.log()
    store = SqliteStore(db, readonly=True)
    # every start the daemon made is recorded, and the jobs of the outages are in the ledger
    kinds = {(job, kind) for job, kind in store.db.execute("select job, kind from events")}
    for job in (first, full, frozen, shm):
        assert (job, "action") in kinds and (job, "arrival") in kinds, job


def test_the_database_and_its_directory_deleted_under_a_running_daemon(clean, tmp_path):
    """The daemon writes it back from the copy it still has open (nothing lost), locks a
    new lock file, and goes on; a second daemon is still refused."""
    cluster = clean
    state = tmp_path / "state"
    db = state / "gavel.db"
    config = write_config(tmp_path, cluster, database=str(db), round_seconds=3, tick_seconds=1)
    daemon = LoggedDaemon(config, tmp_path / "daemon.log")
    try:
        daemon.wait_for(" kept, ")
        first = submit(cluster, tmp_path, "convnet", 1, 30)
        daemon.wait_for(f"release: {first}")
        shutil.rmtree(state)
        before = len(daemon.log())
        daemon.wait_for("written back from the copy", after=before)
        wait_pid_in_lock(db, daemon.proc.pid)
        second = run_daemon(config)
        assert second.returncode == 3 and f"pid {daemon.proc.pid}" in second.stderr, second.stderr
        later = submit(cluster, tmp_path, "convnet", 1, 4)
        daemon.wait_for(f"release: {later}", after=before)
    finally:
        code = daemon.stop()
    assert code == 0, daemon.log()[-3000:]
    store = SqliteStore(db, readonly=True)
    ids = {r["id"] for r in store.jobs(states=("active", "completed"))}
    assert {first, later} <= ids                       # the rows from before the deletion are there
    assert store.job_time().get(first)


# -- the store alone -----------------------------------------------------------------------------
def test_a_replaced_database_file_is_noticed_and_the_new_one_opened(tmp_path):
    store = SqliteStore(tmp_path / "gavel.db")
    store.event(1.0, "before")
    other = SqliteStore(tmp_path / "other.db")
    other.event(2.0, "other")
    other.close()
    os.replace(tmp_path / "other.db", tmp_path / "gavel.db")
    assert store.moved() == "replaced"
    with pytest.raises(StoreUnwritable, match="replaced while open"):
        store.event(3.0, "lost?")
    assert "replaced" in store.recover()
    store.event(4.0, "after")
    kinds = [k for (k,) in SqliteStore(tmp_path / "gavel.db", readonly=True).db.execute(
        "select kind from events order by id")]
    assert kinds == ["other", "after"]


def test_a_full_disk_is_one_clear_error_and_the_store_goes_on_after(small_fs):
    store = SqliteStore(small_fs / "gavel.db")
    filler = fill(small_fs)
    with pytest.raises(StoreUnwritable) as e:
        for i in range(2000):
            store.event(float(i), "x", None, "y" * 2000)
    assert str(e.value) == (f"database {small_fs / 'gavel.db'} is not writable: disk full; "
                            f"free space, the daemon resumes by itself")
    filler.unlink()
    store.probe()
    store.event(1.0, "after")
    store.close()


def test_a_deleted_database_file_is_written_back_with_every_row(tmp_path):
    """Only the file deleted (its -wal and -shm left at the path): the copy written back has
    every row, and the old -wal is not replayed into it."""
    store = SqliteStore(tmp_path / "gavel.db")
    for i in range(50):
        store.event(float(i), "before", None, "x" * 100)
    (tmp_path / "gavel.db").unlink()
    assert store.moved() == "deleted"
    with pytest.raises(StoreUnwritable, match="deleted while open"):
        store.event(99.0, "unrecorded")
    assert "written back" in store.recover()
    assert store.moved() is None
    store.event(100.0, "after")
    store.close()
    reader = SqliteStore(tmp_path / "gavel.db", readonly=True)
    kinds = [k for (k,) in reader.db.execute("select kind from events order by id")]
    assert kinds == ["before"] * 50 + ["after"]
    assert reader.db.execute("pragma integrity_check").fetchone()[0] == "ok"
