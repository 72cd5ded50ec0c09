"""tools/slurm-chroot.sh, the Slurm 24.11 root of the test command's second pass: it runs
this venv on a newer Slurm, keeps only CI and GAVEL_* of the environment, and leaves
nothing mounted and the host's /dev alone.  Root only (it builds the root on first use,
about a minute); under CI a failure, never a skip."""
from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.slurm import in_ci

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "slurm-chroot.sh"


@pytest.fixture(scope="module")
def chroot():
    if os.geteuid() != 0:
        if in_ci():
            pytest.fail("CI must run tools/slurm-chroot.sh, but this is not root", pytrace=False)
        pytest.skip("tools/slurm-chroot.sh needs root")

    def run(*args, env=None):
        return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True,
                              timeout=900, env=env, cwd=ROOT)
    return run


def mounts() -> list[str]:
    return Path("/proc/self/mountinfo").read_text().splitlines()


def test_the_venv_runs_on_slurm_24_11_and_only_ci_and_gavel_settings_get_in(chroot):
    env = dict(os.environ, GAVEL_PROBE="a b; $(x)", OTHER_PROBE="no")
    code = ("import json, os; from slurm_gavel.devcluster import slurm_version; "
            "print(json.dumps([slurm_version(), os.getcwd(), {k: v for k, v in os.environ.items() "
            "if k.endswith('_PROBE')}]))")
    result = chroot("python", "-c", code, env=env)
    assert result.returncode == 0, result.stderr
    version, cwd, probes = json.loads(result.stdout.strip().splitlines()[-1])
    assert tuple(version[:2]) >= (23, 11)
    assert cwd == str(ROOT)
    assert probes == {"GAVEL_PROBE": "a b; $(x)"}


def test_nothing_stays_mounted_and_the_hosts_dev_null_is_untouched(chroot):
    before = mounts()
    # a command that writes to its /dev/null and fails: the root's own, and its exit code
    result = chroot("bash", "-c", "echo x > /dev/null; rm -f /dev/null; exit 3")
    intact = os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if not intact:       # give the host back its /dev/null before failing
        with contextlib.suppress(FileNotFoundError):
            os.unlink("/dev/null")
        os.mknod("/dev/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        os.chmod("/dev/null", 0o666)
    assert intact, "the host's /dev/null was changed inside the root"
    assert result.returncode == 3, result.stderr
    assert mounts() == before


def test_a_cluster_in_the_root_with_the_same_directory_name_leaves_the_hosts_running(chroot, tmp_path):
    """The root has its own /tmp, so a cluster there can have the very directory name of a
    host's cluster (pytest numbers its temporary dirs alike on both sides); stopping it
    must not stop the host's daemons or jobs, which carry that name too."""
    from tests.support.slurm import require_slurm, running_cluster
    require_slurm()
    directory = tmp_path / "twin"
    with running_cluster(directory, {"v100": (1, 1)}) as host:
        job = host.run(["sbatch", "--parsable", "-o", "/dev/null", "--gres=gpu:1", "--wrap",
                        "sleep 120"], cwd=tmp_path).stdout.strip().split(";")[0]
        deadline = time.monotonic() + 30
        while "RUNNING" not in host.run(["squeue", "-h", "-o", "%T", "-j", job]).stdout:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        code = ("import sys; from pathlib import Path; "
                "from slurm_gavel.devcluster import DevCluster, pick_ports; "
                "c, d = pick_ports(1); "
                "cl = DevCluster(Path(sys.argv[1]), {'v100': (1, 1)}, ctld_port=c, slurmd_port=d); "
                "cl.up(); cl.run(['sbatch', '-o', '/dev/null', '--wrap', 'sleep 60']); "
                "import time; time.sleep(2); print('stopped', cl.down())")
        result = chroot("python", "-c", code, str(directory))
        assert result.returncode == 0, result.stderr
        assert host.run(["scontrol", "ping"], check=False).returncode == 0, "the host's slurmctld was stopped"
        assert "RUNNING" in host.run(["squeue", "-h", "-o", "%T", "-j", job]).stdout, \
            "the host's job was stopped"


def test_a_second_command_waits_while_the_root_is_being_built(chroot):
    """Two commands that find no root (test.sh's version passes start side by side, two
    checkouts share /var/tmp) must not debootstrap into the same folder: the second waits on
    the root's lock.  Here the lock is held as a build holds it, and the command waits."""
    import fcntl
    lock_path = Path("/var/tmp/slurm-gavel-trixie.lock")
    chroot("true")                  # the root exists (built on first use)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        proc = subprocess.Popen(["bash", str(SCRIPT), "true"], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(3)
            assert proc.poll() is None, proc.communicate()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
        _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
