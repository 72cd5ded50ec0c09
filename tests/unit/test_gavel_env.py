"""bench/gavel_env.sh's source step on a made-up Gavel history: scheduler/ of the one commit
without traces/msr (whose blobs a partial copy lacks), and the two max-min policy files of the
other.  No fetch, no venv: SOURCE_ONLY=1 stops before them."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "gavel_env.sh"


def _git(repo: Path, *args: str) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_source_is_the_commit_without_msr_traces_and_the_older_policy_files(tmp_path):
    repo = tmp_path / "gavel"
    repo.mkdir()
    _git(repo, "init", "-q")
    _write(repo, {"scheduler/policies/max_min_fairness.py": "old mmf\n",
                  "scheduler/policies/policy.py": "old policy\n",
                  "scheduler/scheduler.py": "old scheduler\n"})
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "before")
    before = _git(repo, "rev-parse", "HEAD")
    _write(repo, {"scheduler/policies/max_min_fairness.py": "new mmf\n",
                  "scheduler/policies/policy.py": "new policy\n",
                  "scheduler/policies/fifo.py": "fifo\n",
                  "scheduler/scheduler.py": "new scheduler\n",
                  "scheduler/traces/msr/seed=0/philly.trace": "large\n",
                  "scheduler/traces/physical_cluster/small.trace": "small\n",
                  "README.md": "not scheduler\n"})
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "after")
    after = _git(repo, "rev-parse", "HEAD")
    dest = tmp_path / "dest"
    out = subprocess.run(["bash", str(SCRIPT), str(repo / ".git"), str(dest)], capture_output=True,
                         text=True, env=dict(os.environ, SOURCE_ONLY="1", COMMIT=after,
                                             POLICY_COMMIT=before))
    assert out.returncode == 0, out.stderr
    src = dest / "src"
    files = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file())
    assert files == ["scheduler/policies/fifo.py", "scheduler/policies/max_min_fairness.py",
                     "scheduler/policies/policy.py", "scheduler/scheduler.py",
                     "scheduler/traces/physical_cluster/small.trace"]
    assert (src / "scheduler/scheduler.py").read_text() == "new scheduler\n"
    assert (src / "scheduler/policies/max_min_fairness.py").read_text() == "old mmf\n"
    assert (src / "scheduler/policies/policy.py").read_text() == "old policy\n"
    assert not (dest / "venv").exists()
