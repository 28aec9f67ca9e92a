"""The family of classify/rules/65-native-crashes.yaml: native crashes and kills as the shell,
Python or a launcher (xargs, GNU make, timeout, parallel) print them: a launcher's report of the
signal its child died of is that crash or kill, a launcher's error that is not a signal is not;
bash's bare "Killed" is a kill, host memory when the job's logs hold OOM evidence. Pure logic
over small written logs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from classifylib import LOOP_PROGRESS, TRAINING, job_verdict, log_alone, task, write

from gpualert_slurm.classify import (
    JobFacts,
    TaskInput,
    classify,
)

# ---- a launcher's report of the signal its child died of ----

@pytest.mark.parametrize("line,cls", [
    ("xargs: python3: terminated by signal 9", "killed"),
    ("xargs: sh: terminated by signal 15", "killed"),
    ("make: *** [Makefile:7: train] Killed", "killed"),
    ("make[1]: *** [Makefile:3: all] Error 137", "killed"),
    ("timeout: sending signal KILL to command 'python'", "killed"),
    ("train.service: Main process exited, code=killed, status=9/KILL", "killed"),
    ("xargs: sh: terminated by signal 11", "segfault"),
    ("make: *** [Makefile:2: eval] Segmentation fault", "segfault"),
])
def test_launcher_reports_child_signal(tmp_path: Path, line: str, cls: str) -> None:
    v = job_verdict([task(tmp_path, LOOP_PROGRESS + line + "\n", exit_code=125)])
    assert v.cls == cls, v.to_json()


def test_make_error_other_than_a_signal_is_not_killed(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, LOOP_PROGRESS + "make: *** [Makefile:2: all] Error 3\n",
                      exit_code=2)])
    assert v.cls != "killed"


def test_bare_killed_from_bash_is_killed_and_with_oom_evidence_anywhere_host_oom(tmp_path):
    log = tmp_path / "0.0.log"
    with open(log, "wb") as out:
        p = subprocess.run(["bash", "-c", f"{sys.executable} -c 'import os; print(1, flush=True);"
                            " os.kill(os.getpid(), 9)'; exit $?"], stdout=out,
                           stderr=subprocess.STDOUT, timeout=60)
    assert p.returncode == 137 and "Killed" in log.read_text()
    v = classify([TaskInput(str(log))], JobFacts(exit_code=137))
    assert v.cls == "killed" and "Killed" in v.evidence[0].text
    # the same job with slurmstepd's cgroup OOM message forwarded into another log
    other = write(tmp_path, "batch.0.log", "slurmstepd: error: Detected 1 oom-kill event(s) in "
                  "StepId=5.0 cgroup. Some of your processes may have been killed by the cgroup "
                  "out-of-memory handler.\n")
    v = classify([TaskInput(str(log)), TaskInput(other, step="batch")], JobFacts(exit_code=137))
    assert v.cls == "host_oom"


# ---- a batch script's shell reporting a crash, its signal's name padded ----

@pytest.mark.parametrize("word", ["Bus error", "Illegal instruction", "Aborted"])
@pytest.mark.parametrize("core", [True, False])
def test_a_scripts_shell_pads_the_crash_signal_name(tmp_path: Path, word: str,
                                                    core: bool) -> None:
    """bash pads a job's end to a column ("Killed                  cmd"): "Bus error
    (core dumped)" with spaces between, or no core at all (was: unknown; only one space
    was read)."""
    end = f"{word:<24}" + ("(core dumped) " if core else "") + "python3 fit.py --cfg a.yaml\n"
    text = TRAINING + "/var/spool/slurmd/job70211/slurm_script: line 14: 51003 " + end
    assert log_alone(tmp_path, text) == "segfault"


@pytest.mark.parametrize("sig", ["BUS", "ILL", "ABRT"])
def test_real_bash_script_reports_a_crash_signal(tmp_path: Path, sig: str) -> None:
    """The same from a real bash running a batch script (LANG=C): its report of a command
    that died of SIGBUS / SIGILL / SIGABRT."""
    script = tmp_path / "job.sh"
    # (not the script's last command: bash would exec it and print nothing)
    script.write_text(f"echo 'epoch 2 loss 0.52'\n{sys.executable} -c 'import os, signal; "
                      f"os.kill(os.getpid(), signal.SIG{sig})'\nexit $?\n")
    env = dict(os.environ, LANG="C", LC_ALL="C", LANGUAGE="")
    p = subprocess.run(["bash", "-c", f"ulimit -c 0; bash {script}"], capture_output=True,
                       env=env, timeout=30)
    text = (p.stdout + p.stderr).decode()
    assert p.returncode == 128 + getattr(signal, f"SIG{sig}"), text
    assert log_alone(tmp_path, text) == "segfault", text

