"""What a gavel job's batch script gets wrong about preemption, read from its text.

A gavel job is preempted by a signal to its batch shell (``scancel --batch``):
the training process itself must receive it. Two mistakes lose a job all its
work at the first preemption:

* the training command started without ``exec``: the shell gets the signal,
  and a shell does not pass it on to the command it is waiting for;
* ``torchrun`` (or ``python -m torch.distributed.run``/``launch``) started
  directly: it exits on the signal without waiting for its ranks, which are
  orphaned and keep training on GPUs already given to another job;
* ``accelerate launch`` started directly: it does not pass the signal on either
  (its wrapper, ``python -m slurm_gavel.job.accelerate launch``, does).

A script that sets a ``trap`` is taken to pass the signal on itself.

`warnings(script)` gives the same messages as slurm_conf/job_submit.lua says at
``sbatch`` (tests run both on one table of cases); `slurm-gavel check-job` says
them before it runs the script. Only line numbers are echoed, never the
script's text.
"""
from __future__ import annotations

import re

LAUNCHERS = frozenset({"python", "python3", "srun", "torchrun", "accelerate", "deepspeed",
                       "mpirun", "slurm-gavel"})
MAX_SCRIPT_LINES = 5000        # scan no further: a real job script is short
_WS = " \t\n\v\f\r"            # ASCII whitespace, as the Lua plugin spells it
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_PYTHON = re.compile(r"python[0-9.]*\Z")

TORCHRUN = ("gavel warning: line {line} starts torchrun directly: on preemption torchrun exits "
            "without waiting for its ranks, which keep running; start it as "
            "`exec slurm-gavel run -- torchrun ...` (docs/torchrun.md)")
ACCELERATE = ("gavel warning: line {line} starts accelerate launch directly: it does not pass "
              "the preemption signal to its processes, which are killed or orphaned; start it "
              "as `exec python -m slurm_gavel.job.accelerate launch ...` (docs/accelerate.md)")
NO_EXEC = ("gavel warning: line {line} starts the training without exec: the preemption signal "
           "reaches only the batch shell, which does not pass it on, so the job cannot save a "
           "checkpoint; write `exec` before the command (e.g. exec python train.py)")


def _basename(word: str) -> str:
    return word.rsplit("/", 1)[-1]


def _is_python(word: str) -> bool:
    return _PYTHON.match(word) is not None


def _command_words(line: str) -> list[str]:
    """The first words of a command line, without leading VAR=value assignments and `env`."""
    words = [w for w in re.split(f"[{re.escape(_WS)}]+", line) if w][:8]
    i = 0
    while i < len(words) and (words[i] == "env" or _ASSIGNMENT.match(words[i])):
        i += 1
    return words[i:]


def _starts_torchrun(words: list[str], at: int) -> bool:
    first = _basename(words[at]) if at < len(words) else ""
    if first == "torchrun":
        return True
    if _is_python(first) and at + 2 < len(words) and words[at + 1] == "-m":
        return words[at + 2] in ("torch.distributed.run", "torch.distributed.launch")
    return False


def _starts_accelerate(words: list[str], at: int) -> bool:
    return (at + 1 < len(words) and _basename(words[at]) == "accelerate"
            and words[at + 1] == "launch")


def warnings(script: str) -> list[str]:
    """The preemption mistakes in a batch script's text, one message each."""
    torchrun_line = accelerate_line = last = None
    last_exec, last_word, has_trap, continued = False, "", False, False
    lines = script.split("\n")
    if lines and lines[-1] == "":
        lines.pop()               # a final newline ends the last line, it starts none
    for n, line in enumerate(lines, start=1):
        if n > MAX_SCRIPT_LINES:
            break
        text = line.strip(_WS)
        was_continued, continued = continued, text.endswith("\\")
        if was_continued or not text or text.startswith("#"):
            continue
        words = _command_words(text)
        at, exec_ = (1, True) if words[:1] == ["exec"] else (0, False)
        word = _basename(words[at]) if at < len(words) else ""
        if word == "trap":
            has_trap = True
        if torchrun_line is None and _starts_torchrun(words, at):
            torchrun_line = n
        if accelerate_line is None and _starts_accelerate(words, at):
            accelerate_line = n
        last, last_exec, last_word = n, exec_, word
    found = []
    if torchrun_line is not None:
        found.append(TORCHRUN.format(line=torchrun_line))
    if accelerate_line is not None:
        found.append(ACCELERATE.format(line=accelerate_line))
    if (last is not None and not last_exec and not has_trap
            and (last_word in LAUNCHERS or _is_python(last_word))):
        found.append(NO_EXEC.format(line=last))
    return found


__all__ = ["ACCELERATE", "LAUNCHERS", "NO_EXEC", "TORCHRUN", "warnings"]
