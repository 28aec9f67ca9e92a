"""`gpualert classify <jobdir>` as root on a job dir its user filled with traps: a FIFO must not
block it, a symlink must not make it read (and quote) a file the user could not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SECRET = "torch.OutOfMemoryError: CUDA out of memory. root-only canary 7f3e"


def classify(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    # a FIFO opened for reading blocks until a writer comes: 60 s is ample for a real verdict
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", "classify", *args],
                          capture_output=True, text=True, env=env, timeout=60)


def _secret(tmp_path: Path) -> Path:
    """A root-only file elsewhere on the machine that a job's user wants root to read."""
    d = tmp_path / "root-only"
    d.mkdir(mode=0o700)
    f = d / "secret.log"
    f.write_text(f"{SECRET}\n")
    f.chmod(0o600)
    return f


def test_fifo_and_symlinked_logs_are_left_out_and_do_not_block(tmp_path):
    job = tmp_path / "spool" / "5151"
    tasks = job / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "0.0.log").write_text("step 1\nModuleNotFoundError: No module named 'apex'\n")
    (tasks / "0.0.exit").write_text(json.dumps(
        {"node": "n1", "step": "0", "rank": 0, "exit_code": 1, "signal": 0, "end_time": 5.0}))
    os.mkfifo(tasks / "batch.0.log")  # no writer, ever: a blocking open waits forever
    (tasks / "0.1.log").symlink_to(_secret(tmp_path))
    p = classify("--json", str(job))
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    assert v["class"] == "import_error"
    assert "canary" not in p.stdout
    assert all(e["file"] == str(tasks / "0.0.log") for e in v["evidence"]), v["evidence"]
    # what was left out is said, with why
    assert "batch.0.log" in p.stderr and "0.1.log" in p.stderr
    assert "left out" in p.stderr and "Traceback" not in p.stderr


def test_symlinked_tasks_dir_and_attempt_dir_are_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "0.0.log").symlink_to(_secret(tmp_path))
    (elsewhere / "0.1.log").write_text(f"{SECRET}\n")
    job = tmp_path / "spool" / "5152"
    job.mkdir(parents=True)
    (job / "tasks").symlink_to(elsewhere)
    p = classify("--json", str(job))
    assert p.returncode == 2
    assert "canary" not in p.stdout + p.stderr
    assert "refused" in p.stderr and "Traceback" not in p.stderr

    # a planted attempt-N symlink is not an attempt: attempt 0's own logs are judged
    job2 = tmp_path / "spool" / "5153"
    (job2 / "tasks").mkdir(parents=True)
    (job2 / "tasks" / "0.0.log").write_text("ModuleNotFoundError: No module named 'apex'\n")
    (job2 / "attempt-1").symlink_to(tmp_path / "spool" / "5152")
    p = classify("--json", str(job2))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["class"] == "import_error"


def test_exit_record_that_is_a_fifo_does_not_block(tmp_path):
    job = tmp_path / "spool" / "5154"
    tasks = job / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "0.0.log").write_text("ModuleNotFoundError: No module named 'apex'\n")
    os.mkfifo(tasks / "0.0.exit")
    os.mkfifo(tasks / "0.0.start")
    p = classify("--json", str(job))
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["class"] == "import_error"
