"""The family of classify/rules/10-slurm-facts.yaml: Slurm's final job state and the signal or exit
code that ended the job, when nothing in the logs says more: the time limit over a launcher's
signalled agent, a NODE_FAIL naming the batch host's rank or the node it lost, the shell's exit
codes under a cut-off traceback, and `gpualert classify` reading the task's exit record (beside
the log, or in `gpualert run`'s log dir)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from classifylib import (
    AGENT,
    LOSSES,
    PROGRESS,
    job_verdict,
    run,
    run_py,
    task,
    write,
)

from gpualert_slurm.classify import (
    Cause,
    JobFacts,
    TaskInput,
    classify,
)
from gpualert_slurm.commands.classify import main as classify_main


def _batch_only(tmp_path: Path, node: str | None, ended: bool) -> Cause:
    t = task(tmp_path, "epoch 1: loss 1.93\nepoch 2: 37% 380/1024\n", "batch.0.log", 0,
             exit_code=None, signal=9 if ended else None, step="batch", node=node,
             end_time=2000.0 if ended else None)
    return job_verdict([t], exit_code=None, signal=t.signal, slurm_state="NODE_FAIL",
                       slurm_reason="NodeDown")


def test_torchrun_agent_signalled_by_slurm_time_limit_is_time_limit(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, AGENT.format(sig=15))], slurm_state="TIMEOUT")
    assert v.cls == "time_limit"


# ---- `gpualert classify` fills the exit facts from the records ----

def test_cli_uses_sibling_exit_record(tmp_path, capsys):
    t = run(tmp_path, "print('step 3 done')\nimport sys; sys.exit(3)", name="run.0.log")
    (tmp_path / "run.0.exit").write_text(json.dumps(
        {"node": "n1", "step": "run", "rank": 0, "exit_code": t.exit_code, "signal": None,
         "core_dumped": False, "end_time": 1.0}))
    assert classify_main(["--json", t.path]) == 0
    v = json.loads(capsys.readouterr().out)
    assert "no exit status given" not in v["detail"]
    assert "exit code 3" in v["detail"] and v["root_node"] is None


def test_cli_uses_gpualert_run_log_dir(tmp_path, capsys):
    d = tmp_path / "run"
    p = subprocess.run([sys.executable, "-m", "gpualert_slurm", "run", "--log-dir", str(d), "--",
                        sys.executable, "-c", "import os; os.kill(os.getpid(), 9)"],
                       capture_output=True, timeout=60, env={**os.environ})
    assert (d / "exit.json").exists(), p.stderr
    assert classify_main(["--json", str(d / "output.log")]) == 0
    v = json.loads(capsys.readouterr().out)
    assert v["class"] == "killed", v


def test_lost_node_without_task_records_names_the_unrecorded_rank(tmp_path: Path) -> None:
    b = task(tmp_path, "srun: error: Node failure on n3\n", name="batch.0.log", rank=0,
             exit_code=None, signal=9, step="batch", node="n1", end_time=30.0)
    ts = [task(tmp_path, f"[{r}] it 100\n", name=f"0.{r}.log", rank=r, exit_code=None,
               signal=15, step="0", node=f"n{r + 1}", end_time=5.0) for r in range(2)]
    ts.append(task(tmp_path, "[2] it 100\n", name="0.2.log", rank=2, exit_code=None,
                   step="0"))
    v = classify([b, *ts], JobFacts(signal=9, slurm_state="NODE_FAIL"))
    assert v.cls == "node_failure" and v.root_node == "n3" and v.root_rank == 2


# ---- node_failure: the batch host lost names rank 0 and its node ----

@pytest.mark.parametrize("node", ["gpu-a07", None])
def test_node_fail_batch_host_without_exit_record_is_rank0(tmp_path: Path,
                                                           node: str | None) -> None:
    v = _batch_only(tmp_path, node, ended=False)
    assert (v.cls, v.root_rank, v.root_node) == ("node_failure", 0, node), (v.root_rank, v.detail)


def test_node_fail_batch_host_that_recorded_its_end_names_no_rank(tmp_path: Path) -> None:
    # the batch host lived (its step's end is recorded): another node was lost, unnamed
    v = _batch_only(tmp_path, "gpu-a07", ended=True)
    assert (v.cls, v.root_rank, v.root_node) == ("node_failure", None, None), (v.root_rank,
                                                                               v.detail)


def test_node_fail_named_node_still_decides(tmp_path: Path) -> None:
    b = task(tmp_path, "srun: error: Node failure on n2\n", "batch.0.log", 0, exit_code=None,
             step="batch", node=None, end_time=None)
    r0 = task(tmp_path, PROGRESS, "0.0.log", 0, exit_code=None, signal=9, node="n1",
              end_time=1990.0)
    r1 = task(tmp_path, PROGRESS, "0.1.log", 1, exit_code=None, node="n2", end_time=None)
    v = job_verdict([b, r0, r1], exit_code=None, slurm_state="NODE_FAIL")
    assert (v.cls, v.root_rank, v.root_node) == ("node_failure", 1, "n2"), (v.root_rank, v.detail)


def test_cut_off_traceback_and_shell_exit_codes(tmp_path):
    """A log cut inside a traceback (its exception line lost): an exception, with the class a
    frame rule gives; the shell's 126/127 and a task's 128+N exit code without other evidence."""
    t = run_py(tmp_path, "import torch_not_here_xyz", name="a.log")
    text = Path(t.path).read_text()
    cut = write(tmp_path, "cut.log", text[:text.rindex("ModuleNotFoundError")])
    v = classify([TaskInput(cut)], JobFacts(exit_code=1))
    assert (v.cls, v.decided_by) == ("python_exception", "cut_traceback")
    frames = write(tmp_path, "dev.log", "Traceback (most recent call last):\n  File \"t.py\", line"
                   " 3, in <module>\n  File \"/v/torch/_prims_common/__init__.py\", line 931, in "
                   "check_same_device\n    raise RuntimeError(msg)")
    assert classify([TaskInput(frames)], JobFacts(exit_code=1)).cls == "device_mismatch"
    quiet = write(tmp_path, "q.log", LOSSES)
    assert classify([TaskInput(quiet)], JobFacts(exit_code=126)).cls == "permission_denied"
    assert classify([TaskInput(quiet)], JobFacts(exit_code=127)).cls == "file_not_found"
    v = classify([TaskInput(quiet, exit_code=139, step="batch")], JobFacts(exit_code=11))
    assert v.cls == "segfault"
