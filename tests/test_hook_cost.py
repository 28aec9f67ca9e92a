"""hooks/cost.py: the cost line counts a waited-for child's CPU and, in a forked worker, what
the process spent before the fork (real processes, real CPU burnt)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from gpualert_slurm.hooks import cost


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_waited_child_cpu_is_counted() -> None:
    before = cost.usage()["child_cpu_s"]
    subprocess.run([sys.executable, "-c",
                    "import time\nend = time.process_time() + 0.3\n"
                    "while time.process_time() < end: pass"], check=True)
    u = cost.usage()
    assert u["child_cpu_s"] - before >= 0.25
    assert u["cpu_s"] >= u["child_cpu_s"]
    assert u["child_rss_mib"] > 1


def test_worker_counts_cpu_spent_before_the_fork() -> None:
    _burn(0.3)
    spent = cost.usage()["cpu_s"]
    r, w = os.pipe()
    cost.before_fork()
    pid = os.fork()
    if pid == 0:  # the worker: its own rusage starts at zero
        os.close(r)
        os.write(w, cost.line("42", "epilog-slurmctld").encode())
        os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    text = os.read(r, 4096).decode()
    os.close(r)
    m = re.fullmatch(r"job 42: epilog-slurmctld cost cpu ([\d.]+) s \(children [\d.]+ s\), "
                     r"peak rss ([\d.]+) MiB \(largest child [\d.]+ MiB\)", text)
    assert m, text
    assert float(m.group(1)) >= spent - 0.01
    assert float(m.group(2)) > 1
