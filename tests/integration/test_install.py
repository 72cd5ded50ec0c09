"""The install route of slurm_conf/README.md ("Install"), run for real: a wheel built from
the repository, installed into fresh venvs under a prefix (as /opt/slurm-gavel), its
console scripts and shipped files, and a compute node's venv where only torch (and what
torch itself requires) is there besides the wheel.

No network: the wheel is built with the running venv's setuptools (--no-build-isolation)
and installed --no-deps --no-index; the daemon host's libraries (cvxpy, ...) come from the
running venv's site-packages through a .pth line (what `pip install` of the wheel would
fetch), the compute node's from links to torch's own distribution closure only.
"""
from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from slurm_gavel import __version__

ROOT = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(".venv", ".git", "build", "dist", "*.egg-info", "__pycache__",
                              ".pytest_cache", "*.pyc")
# what the daemon host needs and a compute node must not (setup.cfg install_requires)
DAEMON_ONLY = ("cvxpy", "highspy", "clarabel", "scipy", "sqlite_utils", "prometheus_client")


def run(args, **kw):
    kw.setdefault("timeout", 300)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, **kw)


def ok(done):
    assert done.returncode == 0, f"{done.args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built from a copy of the repository (a build writes build/ and egg-info)."""
    work = tmp_path_factory.mktemp("build")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=SKIP)
    ok(run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
            "-q", "-w", work / "dist", src]))
    [whl] = (work / "dist").glob("slurm_gavel-*.whl")
    return whl


def venv(prefix: Path, wheel: Path, lib_dirs=()) -> Path:
    """A fresh venv at `prefix` with the wheel installed; `lib_dirs` appended to its path."""
    ok(run([sys.executable, "-m", "venv", "--without-pip", prefix]))
    python = prefix / "bin" / "python"
    ok(run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
            "-q", wheel]))
    site = Path(ok(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]))
                .stdout.strip())
    if lib_dirs:
        (site / "zz-libraries.pth").write_text("".join(f"{d}\n" for d in lib_dirs))
    return python


def test_wheel_holds_the_admin_files(wheel):
    import zipfile
    names = zipfile.ZipFile(wheel).namelist()
    data = f"slurm_gavel-{__version__}.data/data/share/slurm-gavel/"
    for f in ("job_submit.lua", "slurm-gavel.service", "gavel.toml.example", "slurm.conf.example",
              "gres.conf.example", "job_templates/resnet18.sbatch"):
        assert data + f in names, f
    assert "slurm_gavel/job/templates/train.py" in names


def test_daemon_host_venv(wheel, tmp_path):
    prefix = tmp_path / "opt" / "slurm-gavel"
    python = venv(prefix, wheel, [sysconfig.get_paths()["purelib"]])
    where = ok(run([python, "-c", "import slurm_gavel; print(slurm_gavel.__file__)"], cwd=tmp_path))
    assert where.stdout.strip().startswith(str(prefix)), where.stdout      # the wheel's, not the repo's
    for script in ("slurm-gavel", "gqueue"):
        done = ok(run([prefix / "bin" / script, "--help"], cwd=tmp_path))
        assert "usage:" in done.stdout
    for command in ("doctor", "daemon", "release-all", "events", "backup"):
        ok(run([prefix / "bin" / "slurm-gavel", command, "--help"], cwd=tmp_path))
    policies = json.loads(ok(run([prefix / "bin" / "slurm-gavel", "policies", "--json"], cwd=tmp_path)).stdout)
    assert any(p["name"] == "max_min_fairness" for p in policies)
    share = prefix / "share" / "slurm-gavel"
    lua = ok(run([python, "-c", "from slurm_gavel.slurm.doctor import shipped_file; "
                                "print(shipped_file('job_submit.lua'))"], cwd=tmp_path)).stdout.strip()
    assert lua == str(share / "job_submit.lua")
    assert (share / "job_submit.lua").read_text() == (ROOT / "slurm_conf" / "job_submit.lua").read_text()
    unit = (share / "slurm-gavel.service").read_text()
    assert re.search(r"^ExecStart=/opt/slurm-gavel/bin/slurm-gavel daemon ", unit, re.MULTILINE)


def torch_closure() -> list[Path]:
    """torch and every distribution it requires (what `pip install torch` brings), as the
    top-level files and folders of the running venv's site-packages."""
    seen, todo, tops = set(), ["torch"], set()
    while todo:
        name = re.split(r"[\s<>=!~;\[(]", todo.pop(), maxsplit=1)[0].lower().replace("_", "-")
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue                        # an optional one that is not installed
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(req)
        for f in dist.files or []:
            top = f.parts[0]
            if not top.endswith((".dist-info", ".pth")) and top not in ("..", "__pycache__"):
                tops.add(Path(dist.locate_file(top)))
    return sorted(p for p in tops if p.exists())


def test_compute_node_venv_has_only_torch(wheel, tmp_path):
    pytest.importorskip("torch")
    libs = tmp_path / "torch-only"
    libs.mkdir()
    for p in torch_closure():
        (libs / p.name).symlink_to(p)
    assert (libs / "torch").exists()
    for name in DAEMON_ONLY:
        assert not (libs / name).exists(), name
    prefix = tmp_path / "node" / "slurm-gavel"
    python = venv(prefix, wheel, [libs])
    probe = ("import importlib, sys\n"
             "import torch\n"
             "for m in ('slurm_gavel.job', 'slurm_gavel.job.iterator', 'slurm_gavel.job.progress',\n"
             "          'slurm_gavel.job.distributed', 'slurm_gavel.job.templates.models',\n"
             "          'slurm_gavel.job.templates.train'):\n"
             "    importlib.import_module(m)\n"
             f"missing = [n for n in {DAEMON_ONLY!r} if importlib.util.find_spec(n)]\n"
             "print(sys.modules['slurm_gavel'].__file__, missing)\n")
    done = ok(run([python, "-c", probe], cwd=tmp_path))
    path, missing = done.stdout.strip().split(" ", 1)
    assert path.startswith(str(prefix)) and missing == "[]", done.stdout
    # the daemon side is really absent there: it fails with the missing library's name
    done = run([prefix / "bin" / "slurm-gavel", "policies"], cwd=tmp_path)
    assert done.returncode != 0 and "No module named" in done.stderr
