"""What Slurm's clients say when slurmctld does not answer, told apart from a refusal; and
the partitions' states as sinfo prints them.  (The real commands against a stopped
slurmctld: tests/cluster/test_slurm_state_faults.py.)"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from slurm_gavel.slurm.commands import (SlurmCLI, SlurmCommandError, SlurmUnreachable, controller_down,
                                        transient_update_error, unreachable)

# Slurm 22.05.8's own words (captured against a controller port nobody listens on)
SAID = ("scancel: error: Kill job error on job id 5: Unable to contact slurm controller (connect failure)",
        "slurm_load_jobs error: Socket timed out on send/recv operation",
        "squeue: error: Zero Bytes were transmitted or received")
REFUSED = ("scontrol: error: Invalid job id specified",
           "Job is no longer pending execution for job 5",
           "scancel: error: Kill job error on job id 5: Access/permission denied")


@pytest.mark.parametrize("text", SAID)
def test_slurms_words_for_an_unreachable_controller(text):
    assert unreachable(text)


@pytest.mark.parametrize("text", REFUSED)
def test_a_refusal_is_not_an_unreachable_controller(text):
    assert not unreachable(text)


def test_scontrol_ping_says_whether_a_controller_is_up():
    assert controller_down("Slurmctld(primary) at vm is DOWN\n*****\n** RESTORE SLURMCTLD DAEMON TO SERVICE **")
    assert not controller_down("Slurmctld(primary) at vm is UP")
    assert not controller_down("Slurmctld(primary) at a is DOWN\nSlurmctld(backup) at b is UP")


class Answering(SlurmCLI):
    """Slurm's tools replaced by fixed answers: argv -> (exit code, stdout, stderr)."""

    def __init__(self, answers):
        super().__init__()
        self.answers = answers
        self.argv = []

    def run(self, args, check=True, timeout=None, input=None):
        self.argv.append(list(args))
        code, out, err = self.answers.get(args[0], (0, "", ""))
        if check and code:
            raise (SlurmUnreachable if unreachable(err) else SlurmCommandError)(args, code, err)
        return subprocess.CompletedProcess(args, code, out, err)


def test_an_unreachable_controller_is_said_as_such_and_not_retried():
    cli = Answering({"scontrol": (1, "", SAID[0])})
    with pytest.raises(SlurmUnreachable) as e:
        cli.update(["5"], Partition="v100")
    assert str(e.value).startswith("slurmctld unreachable: `scontrol update jobid=5 Partition=v100` "
                                   "exited 1: scancel: error: Kill job error")
    assert "is slurmctld running?" in str(e.value)
    assert len(cli.argv) == 1            # a partition change is retried, but not this
    assert transient_update_error(SAID[0])     # (which the retry alone would have done)


def test_partition_states_as_sinfo_prints_them():
    cli = Answering({"sinfo": (0, "v100 up\np100 down\nk80 inact\ndebug drain\n", "")})
    assert cli.partition_states() == {"v100": "UP", "p100": "DOWN", "k80": "INACT", "debug": "DRAIN"}
    assert cli.argv == [["sinfo", "--noheader", "--format=%R %a"]]



def tool(bin_dir: Path, name: str, stderr: str, code: int = 1) -> None:
    """An executable `name` in `bin_dir` that says `stderr` and exits `code`."""
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{stderr}' >&2\nexit {code}\n")
    path.chmod(0o755)


def test_slurmdbd_unreachable_is_not_called_slurmctld_unreachable(tmp_path):
    """sacct talks to slurmdbd: its "Socket timed out" is not slurmctld's."""
    tool(tmp_path, "sacct", "sacct: error: Socket timed out on send/recv operation")
    tool(tmp_path, "squeue", "squeue: error: Socket timed out on send/recv operation")
    cli = SlurmCLI(bin_dir=str(tmp_path))
    with pytest.raises(SlurmCommandError) as e:
        cli.run(["sacct", "-X"])
    assert not isinstance(e.value, SlurmUnreachable), e.value
    with pytest.raises(SlurmUnreachable):
        cli.run(["squeue", "-h"])


def test_a_chunked_action_stops_at_an_unreachable_controller_naming_every_job_not_done(tmp_path):
    tool(tmp_path, "scancel", "scancel: error: Kill job error on job id 1: Unable to contact slurm "
                              "controller (connect failure)")
    cli = SlurmCLI(bin_dir=str(tmp_path))
    cli.chunk = 2
    with pytest.raises(SlurmUnreachable) as e:
        cli.signal(["1", "2", "3", "4", "5"], "USR2")
    assert e.value.failed == ("1", "2", "3", "4", "5")
    assert cli.calls == 1                 # not one wait per chunk
