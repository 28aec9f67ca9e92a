"""Logs for the classifier's tests: a task whose log holds a text, or the output of a real
Python process; the verdict on a job of such tasks, the verdict on a job of one task."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from gpualert_slurm.classify import JobFacts, TaskInput, Verdict, classify

# PyTorch (CPU) for the tests that run a real spawn or torchrun job: the venv `make test` makes
# (scripts/install-test-deps.sh), never one that only `make corpus` leaves behind.
TORCH_PY = os.environ.get("GPUALERT_TORCH_VENV", "/opt/gpualert/torch-venv") + "/bin/python"


def task(tmp_path: Path, text: str, name: str = "run.0.log", rank: int = 0,
         exit_code: int | None = 1, signal: int | None = None, **kw: Any) -> TaskInput:
    """The task of rank `rank` whose log `name` (written in tmp_path) holds `text`; `kw`: more
    TaskInput fields (its step is "run" unless `step` says otherwise)."""
    log = tmp_path / name
    log.write_text(text)
    return TaskInput(str(log), rank=rank, step=kw.pop("step", "run"), exit_code=exit_code,
                     signal=signal, **kw)


def job_verdict(tasks: list[TaskInput], **kw: Any) -> Verdict:
    """The verdict on a job of `tasks`; its exit code and signal are the first task's unless
    `exit_code` / `signal` say otherwise; `kw`: more JobFacts fields."""
    code = kw.pop("exit_code", tasks[0].exit_code)
    return classify(tasks, JobFacts(exit_code=code, signal=kw.pop("signal", tasks[0].signal),
                                    **kw))


def verdict(tmp_path: Path, text: str, exit_code: int | None = 1, signal: int | None = None,
            kernel: str | None = None) -> Verdict:
    """The verdict on a job of one task (run.0.log holding `text`) that ended with `exit_code`
    or `signal`; `kernel`: the node's kernel.log for the job."""
    kw = {}
    if kernel is not None:
        (tmp_path / "kernel.log").write_text(kernel)
        kw["kernel_log"] = str(tmp_path / "kernel.log")
    return classify([task(tmp_path, text, exit_code=exit_code, signal=signal)],
                    JobFacts(exit_code=exit_code, signal=signal, **kw))


def run_py(tmp_path: Path, code: str, *args: str, name: str = "0.0.log") -> TaskInput:
    """Run a real Python process (`args`: the interpreter's options) that fails the way `code`
    does; its output is the task's log `name`, its end the task's exit code or signal."""
    log = tmp_path / name
    with open(log, "wb") as out:
        p = subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)], stdout=out,
                           stderr=subprocess.STDOUT, timeout=60)
    rc = p.returncode
    return TaskInput(str(log), rank=0, step="0", exit_code=rc if rc >= 0 else None,
                     signal=-rc if rc < 0 else None)
