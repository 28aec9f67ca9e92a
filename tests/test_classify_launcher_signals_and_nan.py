"""Decision logic added for the weaknesses held-out set 4 showed (corpus/holdout4/README.md):
a launcher's report of its child's signal, "not finite" NaN wordings, a NaN step the loop
skipped (recovered, or skipped to the end), an exception logged as the end of the work on
exit 0 (step `abandoned`), a build without the backend, submitit's UncompletedJobError with
a Slurm state, the root rank from srun's task line when the class is unknown, a lost node whose
tasks left no records. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import job_verdict, task

from gpualert_slurm.classify import JobFacts, classify, load_precedence

PROGRESS = "".join(f"step {i} loss {1 / (i + 1):.4f}\n" for i in range(12))
TB = ('Traceback (most recent call last):\n  File "prep.py", line 40, in main\n'
      '    rows = table[key]\n')


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
    v = job_verdict([task(tmp_path, PROGRESS + line + "\n", exit_code=125)])
    assert v.cls == cls, v.to_json()


def test_make_error_other_than_a_signal_is_not_killed(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, PROGRESS + "make: *** [Makefile:2: all] Error 3\n",
                      exit_code=2)])
    assert v.cls != "killed"


# ---- NaN said as "not finite" ----

@pytest.mark.parametrize("line", [
    "FloatingPointError: non-finite activations in block 3",
    "RuntimeError: validation loss is not finite at epoch 4",
    "ValueError: array must not contain infs or NaNs",
    "AssertionError: non-finite gradients in layer fc1",
])
def test_not_finite_wordings_are_divergence(tmp_path: Path, line: str) -> None:
    v = job_verdict([task(tmp_path, PROGRESS + TB + line + "\n")])
    assert v.cls == "nan_divergence", v.to_json()


def test_no_non_finite_values_is_benign(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, PROGRESS + "check: no non-finite values found\n"
                      + PROGRESS, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure


# ---- a NaN step the loop skipped ----

def test_nan_skipped_then_recovered_is_success(tmp_path: Path) -> None:
    log = PROGRESS + "iter 40: loss is nan, skipping this batch\n" + PROGRESS + "done\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure


def test_nan_skipped_to_the_end_is_silent_divergence(tmp_path: Path) -> None:
    skips = "".join(f"[{i}] loss=nan, skipping batch\n" for i in range(30, 60))
    v = job_verdict([task(tmp_path, PROGRESS + skips + "epoch done\n", exit_code=0)])
    assert v.cls == "nan_divergence" and v.silent_failure
    assert "exited 0" in v.detail


def test_one_late_skip_is_not_a_run(tmp_path: Path) -> None:
    log = PROGRESS + "step 11: grad norm is inf, skipping step\nsaved model\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success"


def test_skipped_nan_then_a_crash_is_the_crash(tmp_path: Path) -> None:
    log = (PROGRESS + "loss is nan, skipping batch\n" + PROGRESS + TB
           + "KeyError: 'labels'\n")
    assert job_verdict([task(tmp_path, log)]).cls == "python_exception"


# ---- an exception logged as the end of the work, exit 0 ----

def test_error_giving_up_and_traceback_at_end_is_its_class_on_exit0(tmp_path: Path) -> None:
    log = PROGRESS + "ERROR shard 4 failed, giving up\n" + TB + "KeyError: 'user_id'\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "python_exception" and v.silent_failure and v.step == "abandoned"
    assert v.detail.startswith("the job exited 0, but:")


def test_abandoned_keeps_the_exceptions_own_class(tmp_path: Path) -> None:
    log = (PROGRESS + TB + "FileNotFoundError: [Errno 2] No such file or directory: 'v.txt'\n"
           + "CRITICAL cannot continue without a vocabulary, exiting\n")
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "file_not_found" and v.silent_failure


def test_traceback_logged_and_work_went_on_is_success(tmp_path: Path) -> None:
    log = (PROGRESS + "ERROR shard 4 unreadable, giving up on it\n" + TB
           + "ValueError: bad row\n" + PROGRESS)
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure


def test_traceback_at_end_without_a_giving_up_line_stays_success(tmp_path: Path) -> None:
    # "Exception ignored in ..." tracebacks at interpreter exit are common and harmless
    log = PROGRESS + "Exception ignored in: <function Pool.__del__>\n" + TB + \
        "OSError: handle is closed\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success"


def test_abandoned_is_a_precedence_step_before_clean_exit() -> None:
    steps = load_precedence()
    assert steps.index("silent_failure") < steps.index("abandoned") < steps.index("clean_exit")


# ---- a build without the backend ----

@pytest.mark.parametrize("line", [
    "RuntimeError: Distributed package doesn't have NCCL built in",
    "RuntimeError: Distributed package doesn't have MPI built in. MPI is only included if ...",
    "RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
])
def test_backend_not_built_is_setup(tmp_path: Path, line: str) -> None:
    assert job_verdict([task(tmp_path, TB + line + "\n")]).cls == "cuda_setup"


# ---- submitit: the state in UncompletedJobError's message ----

SUBMITIT_TB = ('Traceback (most recent call last):\n  File "sweep.py", line 9, in <module>\n'
               '    job.result()\n  File "/x/site-packages/submitit/core/core.py", line 266, '
               'in result\n    r = self.results()\n  File "/x/site-packages/submitit/core/'
               'core.py", line 385, in results\n    raise utils.UncompletedJobError(msg)\n'
               "submitit.core.utils.UncompletedJobError: Job 77 (task: 0) with path /l/77.pkl\n")


@pytest.mark.parametrize("state,cls", [("NODE_FAIL", "node_failure"), ("TIMEOUT", "time_limit"),
                                       ("PREEMPTED", "preempted"),
                                       ("OUT_OF_MEMORY", "host_oom")])
def test_submitit_state_decides(tmp_path: Path, state: str, cls: str) -> None:
    log = (SUBMITIT_TB + f"has not produced any output (state: {state})\n"
           "No output/error stream produced ! Check: /l/77_0_log.out\n")
    v = job_verdict([task(tmp_path, log)])
    assert v.cls == cls, v.to_json()


def test_submitit_failed_state_is_still_an_exception(tmp_path: Path) -> None:
    log = SUBMITIT_TB + "has not produced any output (state: FAILED)\n"
    assert job_verdict([task(tmp_path, log)]).cls == "python_exception"


# ---- where, when why is unknown or a job-level state ----

def test_unknown_names_the_rank_srun_names(tmp_path: Path) -> None:
    t0 = task(tmp_path, "rank 0 part 1\n", name="0.0.log", rank=0, exit_code=0, step="0",
              node="n1", end_time=20.0)
    t1 = task(tmp_path, "rank 1 part 1\n", name="0.1.log", rank=1, exit_code=4, step="0",
              node="n2", end_time=10.0)
    b = task(tmp_path, "rank 0 part 1\nsrun: error: n2: task 1: Exited with exit code 4\n",
             name="batch.0.log", rank=0, exit_code=4, step="batch", node="n1", end_time=21.0)
    v = classify([b, t0, t1], JobFacts(exit_code=4, slurm_state="FAILED"))
    assert v.cls == "unknown" and v.root_rank == 1 and v.root_node == "n2"


def test_unknown_without_a_naming_line_names_no_rank(tmp_path: Path) -> None:
    v = job_verdict([task(tmp_path, "rows 12\n", exit_code=3)])
    assert v.cls == "unknown" and v.root_rank is None


def test_lost_node_without_task_records_names_the_unrecorded_rank(tmp_path: Path) -> None:
    b = task(tmp_path, "srun: error: Node failure on n3\n", name="batch.0.log", rank=0,
             exit_code=None, signal=9, step="batch", node="n1", end_time=30.0)
    ts = [task(tmp_path, f"[{r}] it 100\n", name=f"0.{r}.log", rank=r, exit_code=None,
               signal=15, step="0", node=f"n{r + 1}", end_time=5.0) for r in range(2)]
    ts.append(task(tmp_path, "[2] it 100\n", name="0.2.log", rank=2, exit_code=None,
                   step="0"))
    v = classify([b, *ts], JobFacts(signal=9, slurm_state="NODE_FAIL"))
    assert v.cls == "node_failure" and v.root_node == "n3" and v.root_rank == 2
