"""Try a job script's preemption before it is submitted: `slurm-gavel check-job`.

The script runs here, outside Slurm, the way a gavel job runs under it: with
``SLURM_JOB_ID`` and the other variables the in-job library reads, its own
checkpoint and progress directories, and the preemption signal sent to the
script's own process only (as ``scancel --batch`` does). Two runs:

1. run until it reports a few trained steps, signal it: it must save a
   checkpoint and exit with the requeue code (85);
2. run it again as a requeued job: it must resume at the step it saved; signal
   it again: it must save and exit 85 again.

After each run no process the script started may be left (an orphaned rank
keeps training on GPUs given to another job). The static warnings of
`scriptcheck` come first. Everything the script prints goes to a log file; only
its last lines, made printable, are shown when something fails.
"""
from __future__ import annotations

import os
import shlex
import shutil
import signal as signals
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..core.display import clean
from ..job.progress import read_progress
from . import scriptcheck

REQUEUE_EXIT_CODE = 85         # RequeueExitHold=85: the job asks to be requeued held
LOG_TAIL = 15                  # lines of the script's output shown when a run fails


@dataclass(frozen=True)
class Finding:
    ok: bool
    text: str


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    tail: str = ""                  # the job's last output lines (printable) when a check failed
    directory: Path | None = None   # kept working directory (checkpoints, progress, log)

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def add(self, ok: bool, text: str) -> bool:
        self.findings.append(Finding(ok, text))
        return ok


@dataclass(frozen=True)
class Options:
    signal: str = "USR2"
    min_steps: int = 3              # trained steps reported before the signal
    start_timeout: float = 300.0    # seconds to the first trained steps (imports, data, model)
    save_timeout: float = 120.0     # seconds from the signal to the exit
    grace: float = 5.0              # seconds for leftover processes before SIGKILL
    keep: bool = False              # keep the working directory (checkpoints, log)


def interpreter(script: Path) -> list[str]:
    """The command Slurm would run `script` with: its #! line, else /bin/sh."""
    with open(script, "rb") as f:
        first = f.readline(4096)
    if first.startswith(b"#!"):
        words = shlex.split(first[2:].decode("utf-8", "replace"))
        if words:
            return words
    return ["/bin/sh"]


def _session_members(sid: int) -> list[int]:
    """Live processes in session `sid` (the script's own session), from /proc."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path("/proc", entry, "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 3 and fields[3] == str(sid) and fields[0] != "Z":
            members.append(int(entry))
    return members


class _Run:
    """One run of the script in its own session, its records read as it goes."""

    def __init__(self, script: Path, env: dict, log: Path, progress: Path, skip: int):
        self.progress, self.skip = progress, skip
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([*interpreter(script), str(script)], env=env,
                                         cwd=env["SLURM_SUBMIT_DIR"], stdin=subprocess.DEVNULL,
                                         stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def records(self) -> list[dict]:
        try:
            return read_progress(self.progress)[self.skip:]
        except OSError:
            return []

    def wait_for(self, want, timeout: float) -> dict | None:
        """The first record of this run for which `want(record)` holds; None when the
        process ended first or `timeout` passed."""
        deadline = time.monotonic() + timeout
        while True:
            for record in self.records():
                if want(record):
                    return record
            if self.proc.poll() is not None or time.monotonic() > deadline:
                for record in self.records():       # written just before it ended
                    if want(record):
                        return record
                return None
            time.sleep(0.2)

    def exit_code(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def leftovers(self, grace: float) -> list[int]:
        """Processes of its session still alive `grace` seconds after it ended (then killed)."""
        deadline = time.monotonic() + grace
        left = _session_members(self.proc.pid)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _session_members(self.proc.pid)
        self.kill()
        return left

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signals.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            pass


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "it did not exit"
    if code < 0:
        try:
            return f"it was killed by {signals.Signals(-code).name}"
        except ValueError:
            return f"it was killed by signal {-code}"
    return f"it exited with code {code}"


def _tail(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").splitlines()[-LOG_TAIL:]
    except OSError:
        return ""
    return "\n".join("    " + clean(line) for line in lines)


def _preempt(run: _Run, report: Report, options: Options, what: str) -> dict | None:
    """Signal the run's script process; its checkpoint record, when it saved and exited 85."""
    signum = getattr(signals, "SIG" + options.signal.upper().removeprefix("SIG"))
    sent = time.monotonic()
    run.proc.send_signal(signum)
    code = run.exit_code(options.save_timeout)
    seconds = time.monotonic() - sent
    saved = next((r for r in run.records() if r.get("event") == "checkpoint"), None)
    if code == REQUEUE_EXIT_CODE and saved is not None:
        report.add(True, f"{what}: saved a checkpoint at step {saved.get('step')} and exited "
                         f"{REQUEUE_EXIT_CODE} {seconds:.1f} s after SIG{options.signal}")
        return saved
    if code is None:
        report.add(False, f"{what}: still running {options.save_timeout:.0f} s after "
                          f"SIG{options.signal}: the job must save and exit {REQUEUE_EXIT_CODE} "
                          "soon after the signal (Slurm kills it at the end of its grace time)")
    elif code < 0 and -code == signum:
        report.add(False, f"{what}: {_describe_exit(code)}: the signal was not caught. The training "
                          "process must be the one that gets it: start it with `exec`, and call "
                          "catch_signal_early() (or create the GavelIterator / framework callback) "
                          "first thing in the script")
    elif code == REQUEUE_EXIT_CODE:
        report.add(False, f"{what}: exited {REQUEUE_EXIT_CODE} but wrote no checkpoint record: "
                          "the scheduler cannot tell where it stopped")
    else:
        report.add(False, f"{what}: after SIG{options.signal} {_describe_exit(code)}, not "
                          f"{REQUEUE_EXIT_CODE} with a checkpoint: Slurm would end the job "
                          "instead of requeueing it")
    return None


def check_job(script: str | os.PathLike, options: Options = Options(),
              workdir: str | os.PathLike | None = None) -> Report:
    """Run `script` twice as a preempted and requeued gavel job; what went right and wrong."""
    script = Path(script).resolve()
    report = Report()
    text = script.read_text(errors="replace")
    for warning in scriptcheck.warnings(text):
        report.add(False, clean(warning))
    if not text.startswith("#!"):
        report.add(False, "the script has no #! line: sbatch refuses it (write e.g. #!/bin/bash "
                          "first)")
    base = Path(tempfile.mkdtemp(prefix="gavel-check-", dir=workdir))
    log = base / "job.log"
    job_id = f"check{os.getpid()}"
    progress = base / "progress"
    progress.mkdir()
    env = dict(os.environ)
    env.update({
        "SLURM_JOB_ID": job_id, "SLURM_JOBID": job_id, "SLURM_SUBMIT_DIR": str(script.parent),
        "SLURM_JOB_PARTITION": "check", "SLURMD_NODENAME": socket.gethostname(),
        "SLURM_RESTART_COUNT": "0", "GAVEL_CHECKPOINT_DIR": str(base / "checkpoints"),
        "GAVEL_PROGRESS_DIR": str(progress), "GAVEL_PROGRESS_INTERVAL": "0.5",
    })
    records = progress / f"{job_id}.jsonl"

    def trained(record):
        step = record.get("step")
        return (record.get("event") in ("progress", "checkpoint", "done")
                and isinstance(step, (int, float)) and step >= options.min_steps)

    try:
        run = _Run(script, env, log, records, skip=0)
        first = run.wait_for(trained, options.start_timeout)
        if first is None or first.get("event") == "done":
            code = run.exit_code(0.5)
            run.kill()
            if first is not None:
                report.add(False, f"the job finished (done at step {first.get('step')}) before "
                                  "it could be preempted: give it more steps to check it")
            elif not run.records():
                report.add(False, f"no progress record in {options.start_timeout:.0f} s "
                                  f"({_describe_exit(code) if code is not None else 'still running'}): "
                                  "train through slurm_gavel's GavelIterator or a framework "
                                  "integration (docs/), which write them")
            else:
                report.add(False, f"fewer than {options.min_steps} trained steps reported in "
                                  f"{options.start_timeout:.0f} s ({_describe_exit(code) if code is not None else 'still running'})")
            return report
        report.add(True, f"first run: trained and reported step {first.get('step')}")
        saved = _preempt(run, report, options, "first run")
        left = run.leftovers(options.grace)
        report.add(not left, "first run: no process left after it exited" if not left else
                   f"first run: {len(left)} processes started by the job still ran after it "
                   "exited (under Slurm they would keep using GPUs given to another job): start "
                   "the training with exec, and a multi-process launcher as "
                   "`exec slurm-gavel run -- torchrun ...`")
        if saved is None:
            return report
        env["SLURM_RESTART_COUNT"] = "1"
        skip = len(read_progress(records))
        run = _Run(script, env, log, records, skip=skip)
        start = run.wait_for(lambda r: r.get("event") == "start", options.start_timeout)
        if start is None:
            run.kill()
            report.add(False, "second run: no start record (it did not resume)")
            return report
        if start.get("step") == saved.get("step"):
            report.add(True, f"second run: resumed at step {start.get('step')}")
        else:
            report.add(False, f"second run: started at step {start.get('step')}, not at the "
                              f"saved step {saved.get('step')}")
        _preempt(run, report, options, "second run")
        left = run.leftovers(options.grace)
        if left:
            report.add(False, f"second run: {len(left)} processes of the job still ran after it "
                              "exited")
        return report
    finally:
        if not report.ok:
            report.tail = _tail(log)
        if options.keep:
            report.directory = base
        else:
            shutil.rmtree(base, ignore_errors=True)


__all__ = ["Finding", "Options", "Report", "check_job", "interpreter"]
