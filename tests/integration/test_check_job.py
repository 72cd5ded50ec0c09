"""`check_job` (slurm-gavel check-job) on real scripts run as real processes: a job that
honours the protocol passes both runs; each way of getting it wrong is said, with no
process of the job left behind."""
from __future__ import annotations

import sys
import textwrap
import time

import pytest

from slurm_gavel.slurm.checkjob import Options, check_job, interpreter

FAST = Options(start_timeout=300, save_timeout=120, grace=1.0)

# A torch-free loop through the real GavelIterator (quick to start), saving its state in JSON.
LOOP = textwrap.dedent("""\
    import json, sys, time
    from slurm_gavel.job.iterator import GavelIterator, catch_signal_early
    catch_signal_early()
    state = {"sum": 0}
    def save(path):
        with open(path, "w") as f: json.dump(state, f)
    def load(path):
        with open(path) as f: state.update(json.load(f))
    for x in GavelIterator(range(100000), load, save, total_steps=STEPS):
        state["sum"] += x
        if x % 10 == 0:
            print("at", x, flush=True)
        time.sleep(0.02)
    print("sum", state["sum"])
    """)


def write(tmp_path, name, script):
    path = tmp_path / name
    path.write_text(script)
    return path


def job(tmp_path, body, *, steps=100000, launch="exec", shebang="#!/bin/bash\n"):
    loop = write(tmp_path, "loop.py", LOOP.replace("STEPS", str(steps)) if body is None else body)
    return write(tmp_path, "job.sh", f"{shebang}{launch} {sys.executable} {loop}\n".replace(
        "\n ", "\n"))


def texts(report):
    return [(f.ok, f.text) for f in report.findings]


def test_a_job_that_keeps_the_protocol_passes(tmp_path):
    report = check_job(job(tmp_path, None), FAST, workdir=tmp_path)
    assert report.ok, texts(report)
    said = " | ".join(f.text for f in report.findings)
    assert "first run: saved a checkpoint at step" in said
    assert "second run: resumed at step" in said and "second run: saved" in said
    assert list(tmp_path.glob("gavel-check-*")) == []        # its working directory is gone


def test_without_exec_the_signal_kills_the_shell_and_the_training_is_left(tmp_path):
    start = time.monotonic()
    report = check_job(job(tmp_path, None, launch=""), FAST, workdir=tmp_path)
    assert not report.ok
    said = [f.text for f in report.findings if not f.ok]
    assert any("without exec" in t for t in said)                    # the static warning
    assert any("killed by SIGUSR2: the signal was not caught" in t for t in said)
    assert any("processes started by the job still ran" in t for t in said)
    assert report.tail                                               # the job's output is shown
    assert time.monotonic() - start < 60


def test_a_script_that_ignores_the_protocol(tmp_path):
    plain = "import time\nfor i in range(10**6):\n    time.sleep(0.01)\n"
    report = check_job(job(tmp_path, plain), Options(start_timeout=3, grace=1.0),
                       workdir=tmp_path)
    assert not report.ok
    assert any("no progress record" in f.text for f in report.findings)


def test_exit_zero_on_the_signal_is_not_a_requeue(tmp_path):
    # after the iterator's own handler is installed: a script that ends itself on the signal
    body = LOOP.replace("STEPS", "100000").replace(
        '    state["sum"] += x\n',
        '    state["sum"] += x\n    if x == 0:\n        import signal\n'
        '        signal.signal(signal.SIGUSR2, lambda *a: sys.exit(0))\n')
    report = check_job(job(tmp_path, body), FAST, workdir=tmp_path)
    assert any("it exited with code 0, not 85" in f.text for f in report.findings), texts(report)


def test_too_few_steps_to_preempt(tmp_path):
    report = check_job(job(tmp_path, None, steps=2), FAST, workdir=tmp_path)
    assert not report.ok
    assert any("fewer than 3 trained steps" in f.text or "before it could be preempted" in f.text
               for f in report.findings), texts(report)


def test_no_shebang_is_said_and_keep_keeps_the_directory(tmp_path):
    report = check_job(job(tmp_path, None, shebang=""), Options(start_timeout=300, grace=1.0,
                                                                 keep=True), workdir=tmp_path)
    assert any("no #! line" in f.text for f in report.findings)
    assert report.directory is not None and (report.directory / "job.log").exists()
    assert list((report.directory / "checkpoints").iterdir())


def test_interpreter(tmp_path):
    assert interpreter(write(tmp_path, "a", "#!/usr/bin/env bash -x\necho\n")) == \
        ["/usr/bin/env", "bash", "-x"]
    assert interpreter(write(tmp_path, "b", "echo\n")) == ["/bin/sh"]


def test_the_template_job_passes(tmp_path):
    """A real PyTorch job: the a3c template, as its sbatch script starts it."""
    pytest.importorskip("torch")
    script = write(tmp_path, "a3c.sh", f"#!/bin/bash\nexec {sys.executable} -m "
                                       "slurm_gavel.job.templates a3c --steps 100000\n")
    report = check_job(script, Options(start_timeout=300, save_timeout=120, grace=1.0),
                       workdir=tmp_path)
    assert report.ok, texts(report)


def test_the_command(tmp_path, capsys):
    import json

    from slurm_gavel.cli import main
    script = job(tmp_path, None)
    assert main(["check-job", str(script), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and any("resumed at step" in f["text"] for f in out["findings"])
    bad = write(tmp_path, "bad.sh", f"#!/bin/bash\n{sys.executable} -c 'print(1)'\n")
    assert main(["check-job", str(bad), "--timeout", "5"]) == 1
    shown = capsys.readouterr().out
    assert "PROBLEM  gavel warning: line 2 starts the training without exec" in shown
    assert main(["check-job", str(tmp_path / "missing.sh")]) == 2
    assert main(["check-job", str(script), "--signal", "KILL"]) == 2
