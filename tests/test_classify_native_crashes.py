"""The family of classify/rules/65-native-crashes.yaml: native crashes as the shell, Python or
a launcher (xargs, GNU make, timeout, parallel) print them: a launcher's report of the signal
its child died of is that crash or kill; a launcher's error that is not a signal is not.
Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import LOOP_PROGRESS, job_verdict, task

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
