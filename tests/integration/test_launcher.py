"""slurm_gavel.job.launcher with real torchrun: 2 gloo ranks on the CPU, GavelIterator in each.

The launcher is signalled by its pid, as the daemon's `scancel --batch` signals the
batch process: both ranks checkpoint, the launcher exits 85 and no process of the
command is left (every process started by a test carries a marker in its
environment, looked for in /proc). Resumed three times, the run ends bitwise
equal to an uninterrupted one. A rank that crashes, or fails to save, is a
failure (not 85) with no survivors; SIGKILL of the launcher leaves no rank alive.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from tests.support.procs import MARKER, marked
from tests.support.torch_import import import_torch
from tests.support.waiting import wait_for

from slurm_gavel.job import launcher

torch = import_torch()
ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "jobs" / "tiny_train.py"
TORCHRUN = Path(sys.executable).with_name("torchrun")
STEPS = 60


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


class Run:
    """One launcher process running torchrun --nproc-per-node 2 tiny_train.py."""

    def __init__(self, tmp: Path, out: Path, managed=True, command=None, **env):
        self.marker = uuid.uuid4().hex
        self.out = out
        out.mkdir(exist_ok=True)
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "GAVEL_"))}
        environ.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", TINY_SLEEP="0.05",
                       GAVEL_CHECKPOINT_DIR=str(tmp / "ckpt"), SLURM_SUBMIT_DIR=str(tmp),
                       **{MARKER: self.marker}, **env)
        if managed:
            environ["SLURM_JOB_ID"] = "4242"
        self.log = open(tmp / f"launcher-{self.marker}.err", "w")
        command = command or [str(TORCHRUN), "--standalone", "--nproc-per-node", "2"]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "slurm_gavel.job.launcher", "--grace", "5", "--",
             *command, str(TINY), str(out), str(STEPS)],
            env=environ, cwd=tmp, stdout=subprocess.DEVNULL, stderr=self.log)
        self.log_path = Path(self.log.name)

    def steps(self) -> int:
        return _lines(self.out / "batches-0.log")

    def wait(self, timeout=180) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.log.close()

    def stderr(self) -> str:
        """The log's tail, for assertion messages."""
        return self.whole_log()[-4000:]

    def whole_log(self) -> str:
        return self.log_path.read_text()


def _final(out: Path, rank: int) -> dict:
    return torch.load(out / f"final-{rank}.pt", weights_only=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 2-rank run (through the launcher, never signalled)."""
    tmp = tmp_path_factory.mktemp("reference")
    run = Run(tmp, tmp / "out")
    assert run.wait() == 0, run.stderr()
    return [_final(tmp / "out", r) for r in range(2)]


def test_preempted_three_times_the_run_ends_bitwise_equal_and_leaves_nothing(tmp_path, reference):
    out = tmp_path / "out"
    preemptions = 0
    while True:
        run = Run(tmp_path, out)
        before = run.steps()
        if preemptions < 3:
            wait_for(lambda: run.steps() >= before + 8 or run.proc.poll() is not None, 300, "steps")
            os.kill(run.proc.pid, signal.SIGUSR2)
        code = run.wait()
        assert wait_for(lambda: not marked(run.marker), 15, "no process left")
        if preemptions == 3:
            assert code == 0, run.stderr()
            break
        assert code == launcher.REQUEUE_EXIT_CODE, run.stderr()
        assert "preempted: its 2 rank(s) checkpointed and exited 85" in run.stderr()
        assert any((tmp_path / "ckpt" / "4242").glob("step-*")), "no checkpoint saved"
        stopped = run.steps()
        assert before < stopped < STEPS
        preemptions += 1
    for rank in range(2):
        final = _final(out, rank)
        assert final["step"] == STEPS and final["start"] > 0
        assert final["params"].keys() == reference[rank]["params"].keys()
        for name, value in final["params"].items():
            assert torch.equal(value, reference[rank]["params"][name]), (rank, name)
    # each step trained exactly once, by both ranks
    for rank in range(2):
        steps = [int(line.split(":")[0].split()[1])
                 for line in (out / f"batches-{rank}.log").read_text().splitlines()]
        assert sorted(steps) == list(range(1, STEPS + 1))


def test_a_rank_that_crashes_is_a_failure_with_no_survivors(tmp_path):
    run = Run(tmp_path, tmp_path / "out")
    wait_for(lambda: run.steps() >= 3, 300, "steps")
    torchrun = wait_for(lambda: launcher.descendants(run.proc.pid)[1:2], 300, "torchrun")[0]
    ranks = wait_for(lambda: len(k := [p for p in launcher.descendants(torchrun)
                                       if p in marked(run.marker)]) >= 2 and k, 300, "the ranks")
    os.kill(ranks[-1], signal.SIGKILL)
    code = run.wait()
    assert code not in (0, launcher.REQUEUE_EXIT_CODE), run.stderr()
    assert wait_for(lambda: not marked(run.marker), 15, "no process left")


def test_a_failed_save_during_preemption_is_a_failure_with_no_survivors(tmp_path):
    run = Run(tmp_path, tmp_path / "out", TINY_CRASH_IN_SAVE="raise")
    wait_for(lambda: run.steps() >= 3, 300, "steps")
    os.kill(run.proc.pid, signal.SIGUSR2)
    code = run.wait()
    assert code not in (0, launcher.REQUEUE_EXIT_CODE), run.stderr()
    assert wait_for(lambda: not marked(run.marker), 15, "no process left")
    assert not any((tmp_path / "ckpt" / "4242").glob("step-*"))


def test_sigkill_of_the_launcher_leaves_no_rank_alive(tmp_path):
    run = Run(tmp_path, tmp_path / "out")
    wait_for(lambda: run.steps() >= 3, 300, "steps")
    assert len(marked(run.marker)) >= 4          # outer, supervisor, torchrun, 2 ranks
    os.kill(run.proc.pid, signal.SIGKILL)
    run.wait()
    assert wait_for(lambda: not marked(run.marker), 30, "no process left")


def test_sigkill_of_the_supervisor_leaves_no_rank_alive(tmp_path):
    run = Run(tmp_path, tmp_path / "out")
    wait_for(lambda: run.steps() >= 3, 300, "steps")
    supervisor = launcher.descendants(run.proc.pid)[0]
    os.kill(supervisor, signal.SIGKILL)
    assert run.wait() == 128 + signal.SIGKILL        # the outer process ended the tree first
    assert not marked(run.marker)
    # said even when PR_SET_PDEATHSIG has already ended every process below it
    # (the whole log: torchrun's traceback after it can be longer than the tail)
    assert "the supervisor ended (137): killed by signal 9" in run.whole_log(), run.stderr()


def test_a_single_python_process_that_checkpoints_gives_85(tmp_path):
    run = Run(tmp_path, tmp_path / "out", command=[sys.executable])
    wait_for(lambda: run.steps() >= 3, 300, "steps")
    os.kill(run.proc.pid, signal.SIGUSR2)
    assert run.wait() == launcher.REQUEUE_EXIT_CODE, run.stderr()
    assert "preempted: the command checkpointed and exited 85" in run.stderr()
    assert wait_for(lambda: not marked(run.marker), 15, "no process left")


def test_sigterm_is_forwarded_and_is_not_a_preemption(tmp_path):
    run = Run(tmp_path, tmp_path / "out")
    wait_for(lambda: run.steps() >= 3, 300, "steps")
    os.kill(run.proc.pid, signal.SIGTERM)
    code = run.wait()
    assert code not in (0, launcher.REQUEUE_EXIT_CODE), run.stderr()
    # torchrun (first in line) passes SIGTERM on as well: a rank may be gone before its turn
    assert re.search(r"SIGTERM: sent to [123] process\(es\)", run.stderr()), run.stderr()
    assert wait_for(lambda: not marked(run.marker), 15, "no process left")


def test_the_outcome_rule():
    ok, preempted = 85 << 8, True
    usr2 = signal.SIGUSR2                                  # torchrun killed by the signal
    assert launcher.outcome(ok, preempted, {}) == 85          # srun, python: the command says 85
    assert launcher.outcome(0, preempted, {1: ok}) == 0
    assert launcher.outcome(usr2, preempted, {1: ok, 2: ok}) == 85
    assert launcher.outcome(usr2, preempted, {1: ok, 2: None}) == 128 + usr2   # one not seen
    assert launcher.outcome(usr2, preempted, {1: ok, 2: 1 << 8}) == 1          # one failed
    assert launcher.outcome(usr2, preempted, {}) == 128 + usr2
    assert launcher.outcome(1 << 8, False, {1: ok, 2: ok}) == 1               # not preempted


def test_the_parser_keeps_the_command_as_given_and_messages_are_printable(tmp_path):
    args = launcher.build_parser().parse_args(
        ["--signal", "USR1", "--", "torchrun", "--nproc-per-node", "2", "train.py", "--lr", "1"])
    assert args.signal == "USR1"
    assert [a for a in args.command if a != "--"] == ["torchrun", "--nproc-per-node", "2", "train.py",
                                                      "--lr", "1"]
    result = subprocess.run([sys.executable, "-m", "slurm_gavel.job.launcher", "--",
                             str(tmp_path / "no\x1b[31msuch")], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert result.returncode == 127
    assert "\x1b" not in result.stderr and "slurm-gavel run: cannot start" in result.stderr


def test_the_slurm_gavel_run_command(tmp_path):
    """`slurm-gavel run` is the launcher: its exit code passes through unchanged."""
    import subprocess
    import sys
    run = lambda *cmd: subprocess.run([sys.executable, "-m", "slurm_gavel", "run", "--", *cmd],
                                      capture_output=True, text=True, timeout=300, cwd=tmp_path)
    done = run("sh", "-c", "exit 85")
    assert done.returncode == 85 and "exiting 85 (requeue held)" in done.stderr
    assert "failed" not in done.stderr
    done = run("sh", "-c", "exit 3")
    assert done.returncode == 3 and "sh failed: exiting 3" in done.stderr
    assert run("true").returncode == 0
