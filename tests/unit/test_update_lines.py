"""SlurmCLI.update_each: updates as lines of a few `scontrol` processes, and which job a
failure belongs to.  Slurm's answers are played by a stand-in `run` (what scontrol printed on
22.05.8 for such lines, captured on a local cluster); the real thing:
tests/cluster/test_bulk_actions.py."""
from __future__ import annotations

import subprocess

import pytest

from slurm_gavel.core.errors import InputError
from slurm_gavel.slurm.commands import SlurmCLI, SlurmCommandError, SlurmUnreachable, unreachable


class Scripted(SlurmCLI):
    """`scontrol` reading lines answers `batch(lines)` -> (exit code, stderr); `scontrol update`
    alone answers `alone(argv)` the same way."""

    def __init__(self, batch, alone=lambda argv: (0, ""), **kw):
        super().__init__(**kw)
        self.batch, self.alone = batch, alone
        self.calls_seen: list[tuple[list[str], str | None]] = []

    def run(self, args, check=True, timeout=None, input=None):
        self.calls_seen.append((list(args), input))
        code, err = self.batch(input.splitlines()) if args == ["scontrol"] else self.alone(list(args))
        if code is None:
            raise SlurmCommandError(args, None, "")             # timed out
        if check and code:
            raise (SlurmUnreachable if unreachable(err) else SlurmCommandError)(args, code, err)
        return subprocess.CompletedProcess(args, code, "", err)


def ups(*jobs):
    return [(j, {"NodeList": "v100-0", "StartTime": "now"}) for j in jobs]


def test_the_lines_of_one_process_and_no_call_on_its_own_when_all_take():
    cli = Scripted(lambda lines: (0, ""), chunk=2, workers=1)
    assert cli.update_each(ups("1", "2", "3")) == {}
    assert [(a, i) for a, i in cli.calls_seen] == [
        (["scontrol"], "update jobid=1 NodeList=v100-0 StartTime=now\nupdate jobid=2 NodeList=v100-0 StartTime=now\n"),
        (["scontrol"], "update jobid=3 NodeList=v100-0 StartTime=now\n")]


def test_a_refused_line_names_its_job_which_alone_is_done_again_and_fails_with_its_own_error():
    cli = Scripted(lambda lines: (1, "Invalid node name specified for job 2\n"),
                   alone=lambda argv: (1, "Invalid node name specified") if "jobid=2" in argv else (0, ""))
    failures = cli.update_each(ups("1", "2", "3"))
    assert list(failures) == ["2"] and failures["2"].command[:3] == ["scontrol", "update", "jobid=2"]
    assert [a for a, _ in cli.calls_seen] == [["scontrol"], ["scontrol", "update", "jobid=2",
                                                             "NodeList=v100-0", "StartTime=now"]]


def test_a_failure_that_names_no_job_and_a_timeout_do_every_line_again_on_its_own():
    for answer in ((1, "scontrol: error: something unexpected\n"), (None, "")):
        cli = Scripted(lambda lines, answer=answer: answer, chunk=25)
        assert cli.update_each(ups("1", "2")) == {}
        assert [a[:3] for a, _ in cli.calls_seen[1:]] == [["scontrol", "update", "jobid=1"],
                                                          ["scontrol", "update", "jobid=2"]]


def test_an_unreachable_controller_fails_every_line_without_a_call_each():
    said = "scontrol: error: Unable to contact slurm controller (connect failure)\n"
    cli = Scripted(lambda lines: (1, said * len(lines)))
    failures = cli.update_each(ups("1", "2", "3"))
    assert set(failures) == {"1", "2", "3"}
    assert all(isinstance(e, SlurmUnreachable) for e in failures.values())
    assert len(cli.calls_seen) == 1


def test_a_value_a_line_would_split_goes_as_an_argument_of_its_own_call():
    cli = Scripted(lambda lines: (0, ""))
    comment = "gavel: model=convnet | waits: its turn"
    assert cli.update_each([("1", {"AdminComment": comment}), ("2", {"NodeList": "v100-0"})]) == {}
    assert cli.calls_seen[0] == (["scontrol"], "update jobid=2 NodeList=v100-0\n")
    assert cli.calls_seen[1][0] == ["scontrol", "update", "jobid=1", f"AdminComment={comment}"]


@pytest.mark.parametrize("fields", [{"NodeList": "a\nupdate jobid=9 Partition=x"}, {"Bad Key": "1"},
                                    {"Partition": "v100 Priority=0"}])
def test_a_value_that_would_add_a_line_or_a_field_is_refused_before_any_call(fields):
    cli = Scripted(lambda lines: (0, ""))
    with pytest.raises(InputError):
        cli.update_each([("1", fields)])
    assert cli.calls_seen == []


def test_a_job_id_that_is_not_one_is_refused():
    with pytest.raises(InputError):
        Scripted(lambda lines: (0, "")).update_each([("1\nupdate jobid=2", {"NodeList": "x"})])
