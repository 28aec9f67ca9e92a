"""`gpualert classify` as a user runs it: a subprocess, its exit codes, its JSON contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
FIX = Path(__file__).parent / "fixtures" / "classify"
KEYS = {"class", "domain", "confidence", "hint", "detail", "evidence", "root_rank", "root_node",
        "root_step", "cascades"}


def gpualert(*args: str, **kw) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "gpualert_slurm", *args], capture_output=True,
                          text=True, env=env, timeout=120, **kw)


def test_json_contract_for_a_failure_verdict():
    p = gpualert("classify", "--json", "--exit-code", "1", str(FIX / "cuda_oom_then_nccl.log"))
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    assert set(v) >= KEYS
    assert v["class"] == "cuda_oom" and v["domain"] == "workload"
    assert 0 < v["confidence"] <= 1
    assert v["evidence"][0] == {"file": str(FIX / "cuda_oom_then_nccl.log"), "line": 8,
                                "text": v["evidence"][0]["text"]}
    assert isinstance(v["cascades"], list) and v["root_rank"] is None


def test_human_text_names_class_hint_and_evidence_location():
    p = gpualert("classify", "--exit-code", "1", str(FIX / "device_assert.log"))
    assert p.returncode == 0
    assert "cuda_device_assert" in p.stdout
    assert "hint:" in p.stdout
    assert f"{FIX / 'device_assert.log'}:1:" in p.stdout


def test_step_rank_names_and_exit_records_give_the_root_rank(tmp_path):
    (tmp_path / "0.0.log").write_text((FIX / "nccl_rank0.log").read_text())
    (tmp_path / "0.0.exit").write_text(json.dumps(
        {"node": "n1", "step": "0", "rank": 0, "exit_code": 1, "signal": 0, "end_time": 200.5}))
    (tmp_path / "0.1.log").write_text("step 1\nModuleNotFoundError: No module named 'apex'\n")
    (tmp_path / "0.1.exit").write_text(json.dumps(
        {"node": "n2", "step": "0", "rank": 1, "exit_code": 1, "signal": 0, "end_time": 100.0}))
    p = gpualert("classify", "--json", "--exit-code", "1", str(tmp_path / "0.0.log"),
                 str(tmp_path / "0.1.log"))
    v = json.loads(p.stdout)
    assert (v["class"], v["root_rank"], v["root_node"], v["root_step"]) == \
        ("import_error", 1, "n2", "0")
    assert v["cascades"][0]["rank"] == 0


def test_facts_options(tmp_path):
    log = tmp_path / "rank0.log"
    log.write_text("step 1 loss=0.2\n")
    cases = [
        (["--slurm-state", "timeout"], "time_limit"),
        (["--signal", "SIGKILL"], "killed"),
        (["--signal", "11"], "segfault"),
        (["--exit-code", "0"], "success"),
        (["--slurm-state", "TIMEOUT", "--hang", "30m", "--silence", "7200"], "hang"),
        (["--exit-code", "1", "--kernel-log", str(FIX / "xid_kernel.log")], "gpu_hardware"),
        (["--slurm-state", "OUT_OF_MEMORY"], "host_oom"),
    ]
    for opts, expected in cases:
        p = gpualert("classify", "--json", *opts, str(log))
        assert p.returncode == 0, p.stderr
        assert json.loads(p.stdout)["class"] == expected, opts


@pytest.mark.parametrize("args,needle", [
    (["/nonexistent/log.txt"], "no such file"),
    (["{tmp}"], "directory"),
    (["--exit-code", "abc", "{log}"], "invalid int value"),
    (["--signal", "SIGNOPE", "{log}"], "not a signal"),
    (["--hang", "10", "{log}"], "--hang and --silence"),
    (["--hang", "ten", "--silence", "3", "{log}"], "not a duration"),
    (["--kernel-log", "/nonexistent/k", "{log}"], "kernel log"),
    ([], "required"),
])
def test_bad_input_exits_2_with_a_message_and_no_traceback(tmp_path, args, needle):
    log = tmp_path / "a.log"
    log.write_text("x\n")
    argv = [a.format(tmp=tmp_path, log=log) for a in args]
    p = gpualert("classify", *argv)
    assert p.returncode == 2
    assert needle in p.stderr
    assert "Traceback" not in p.stderr


def test_unreadable_log_exits_2(tmp_path):
    log = tmp_path / "secret.log"
    log.write_text("x\n")
    log.chmod(0o600)
    tmp_path.chmod(0o755)
    if os.geteuid() == 0:
        # root reads everything: run the command as nobody, as a job's user would be
        p = gpualert("classify", str(log), user=65534, group=65534, cwd="/")
    else:
        log.chmod(0)
        p = gpualert("classify", str(log))
    assert p.returncode == 2, p.stdout + p.stderr
    assert "Permission denied" in p.stderr and "Traceback" not in p.stderr


def test_bad_site_rule_file_exits_2_naming_it(tmp_path):
    (tmp_path / "bad.yaml").write_text("rules:\n  - id: broken\n    class: cuda_oom\n"
                                       "    patterns: ['[unclosed']\n")
    log = tmp_path / "a.log"
    log.write_text("x\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), GPUALERT_RULES_DIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", "classify", str(log)],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2
    assert "bad.yaml" in p.stderr and "broken" in p.stderr and "patterns" in p.stderr
    assert "Traceback" not in p.stderr


def _attempt(tasks: Path, logs: dict[str, tuple[str, dict]]) -> None:
    tasks.mkdir(parents=True)
    for name, (text, rec) in logs.items():
        (tasks / f"{name}.log").write_text(text)
        (tasks / f"{name}.exit").write_text(json.dumps(rec))


def test_job_directory_judges_the_latest_attempt(tmp_path):
    """<spool>/<jobid> as the argument: attempt 0 (tasks/ at the job root) hit its time limit,
    attempt-1/ (after a requeue) died of a missing module; the verdict is attempt 1's."""
    job = tmp_path / "spool" / "4242"
    rec = {"node": "n2", "step": "0", "rank": 1, "exit_code": 1, "signal": None,
           "core_dumped": False, "end_time": 10.0}
    _attempt(job / "tasks", {"batch.0": (
        "step 1\nslurmstepd: error: *** JOB 4242 ON n1 CANCELLED AT 2026-11-29T10:59:59 DUE TO "
        "TIME LIMIT ***\n", {**rec, "step": "batch", "rank": 0, "exit_code": None,
                            "signal": 15})})
    _attempt(job / "attempt-1" / "tasks", {
        "0.1": ("Traceback (most recent call last):\n  File \"t.py\", line 1, in <module>\n"
                "ModuleNotFoundError: No module named 'apex'\n", rec),
        "0.0": ("step 1\n", {**rec, "rank": 0, "node": "n1", "exit_code": None, "signal": 15,
                             "end_time": 12.0})})
    p = gpualert("classify", "--json", str(job))
    assert p.returncode == 0, p.stderr
    v = json.loads(p.stdout)
    assert (v["class"], v["root_rank"], v["root_node"]) == ("import_error", 1, "n2")
    assert all("attempt-1" in e["file"] for e in v["evidence"])


def test_directory_that_is_not_a_job_dir_is_a_clear_error(tmp_path):
    p = gpualert("classify", "--json", str(tmp_path))
    assert p.returncode == 2
    assert "not a job's spool directory" in p.stderr and "Traceback" not in p.stderr
