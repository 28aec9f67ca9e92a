"""The decision order (classify/precedence.yaml, classify/steps.py: data, checked when read) where
it decides between families, and line reading: a traceback (Python's, a JS error's or a JVM
stack) then a line saying the work stopped at the end of an exit-0 log is a silent failure (step
`abandoned`), keeping the exception's own class; a traceback logged by a run that went on is a
success; a peer's cascade is not the class when the rank that failed first said nothing; a
COMPLETED job whose script recovered from a failed step is a success; a worker that vanished
plus the OOM killer's report is host memory (step `worker_oom`) and does not override an
unrelated cause; an exception line quoted in a bold or code span inside prose is read as that
line. Pure logic over small written logs."""

from __future__ import annotations

from pathlib import Path

import pytest
from classifylib import (
    EPOCH_PROGRESS,
    GLOO,
    LOOP_PROGRESS,
    PREP_TB,
    RUN_TB,
    job_verdict,
    task,
    verdict,
)

from gpualert_slurm.classify import (
    RuleError,
    TaskInput,
    load_precedence,
)
from gpualert_slurm.classify.scan import line_view

ROOT_CAUSE = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
train.py FAILED
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-03-02_10:11:12
  host      : gpu017
  rank      : {rank} (local_rank: {rank})
  exitcode  : {code} (pid: 4242)
  error_file: <N/A>
============================================================
"""


def _steps(tmp_path: Path, codes: list[int]) -> list[TaskInput]:
    out = [task(tmp_path, f"attempt {i + 1}\n" + (RUN_TB + "OSError: fetch failed\n" if c else
                                                  EPOCH_PROGRESS), f"{i}.0.log", step=str(i),
                exit_code=c, end_time=100.0 + i, node="n1") for i, c in enumerate(codes)]
    out.append(task(tmp_path, "attempt 1\nsrun: error: n1: task 0: Exited with exit code 1\n"
                    "attempt 2\nok\n", "batch.0.log", step="batch", exit_code=0,
                    end_time=200.0, node="n1"))
    return out


OOM_LINES = [
    "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=812.0. Some of your processes "
    "may have been killed by the cgroup out-of-memory handler.\n",
    "srun: error: n4: task 0: Out Of Memory\n",
]

WORKER_LOST = [
    "RuntimeError: DataLoader worker (pid 3321) is killed by signal: Killed.\n",
    "RuntimeError: DataLoader worker (pid(s) 3321, 3322) exited unexpectedly\n",
    "concurrent.futures.process.BrokenProcessPool: A process in the process pool was "
    "terminated abruptly while the future was running or pending.\n",
    "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal "
    "SIGKILL\n",
    "ray.exceptions.WorkerCrashedError: The worker died unexpectedly while executing this "
    "task. Check python-core-worker-*.log files for more information.\n",
]

JS_STACK = "".join(f"    at f{i} (/app/export.js:{10 + i}:{i + 3})\n" for i in range(9))


# ---- a printed traceback and "the work stopped" at the end of a log, exit 0 ----

@pytest.mark.parametrize("before,after", [
    ("", "scoring crashed; exiting\n"),
    ("", "evaluation crash\n"),  # a cut-off last line
    ("", "export aborted\n"),
    ("", "1 of 4 shard workers failed, stopping\n"),
    ("", "Bailing out.\n"),
    ("worker shard-2 crashed, shutting down the pool\n", ""),
    ("[2026-02-11 10:00:01] exiting due to an error in the metrics callback\n", ""),
    ("", "conversion failed; exiting with status 0 so the pipeline keeps going\n"),
])
def test_traceback_then_work_stopped_on_exit0_is_a_silent_failure(
        tmp_path: Path, before: str, after: str) -> None:
    log = EPOCH_PROGRESS + before + RUN_TB + "ZeroDivisionError: division by zero\n" + after
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "python_exception" and v.silent_failure and v.decided_by == "abandoned", \
        v.to_json()


def test_work_stopped_keeps_the_exceptions_own_class(tmp_path: Path) -> None:
    log = (EPOCH_PROGRESS + RUN_TB + "FileNotFoundError: [Errno 2] No such file or directory: "
           "'/ckpt/encoder.pt'\n" + "export aborted\n")
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "file_not_found" and v.silent_failure


def test_thread_exception_then_main_stops_is_a_silent_failure(tmp_path: Path) -> None:
    log = (EPOCH_PROGRESS + "Exception in thread shard-2:\n" + RUN_TB
           + "KeyError: 'tokens'\n" + "shard worker shard-2 crashed; stopping\n")
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "python_exception" and v.silent_failure


@pytest.mark.parametrize("after", [
    "shard 3 failed; retrying (attempt 2)\n" + EPOCH_PROGRESS + "done\n",
    "metrics callback crashed; continuing without metrics\n" + EPOCH_PROGRESS,
    "worker crashed; falling back to serial processing\n" + EPOCH_PROGRESS,
    "upload failed, skipping\n" + EPOCH_PROGRESS + "finished\n",
    "crashed once, ignoring: the next epoch recomputes it\n",
    EPOCH_PROGRESS + "evaluation crashed earlier; exiting\n" + EPOCH_PROGRESS,
])
def test_traceback_logged_and_work_went_on_stays_success(tmp_path: Path, after: str) -> None:
    log = EPOCH_PROGRESS + RUN_TB + "ZeroDivisionError: division by zero\n" + after
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure, v.to_json()


def test_stop_line_without_a_traceback_stays_success(tmp_path: Path) -> None:
    # no traceback printed: "RuntimeError: x" in a message and a stop word is not enough
    log = EPOCH_PROGRESS + "note: RuntimeError: x was seen in the data\nstopping: all done\n"
    assert job_verdict([task(tmp_path, log, exit_code=0)]).cls == "success"


def test_completed_training_exiting_stays_success(tmp_path: Path) -> None:
    log = EPOCH_PROGRESS + RUN_TB + "ValueError: bad row\n" + "training complete, exiting\n"
    assert job_verdict([task(tmp_path, log, exit_code=0)]).cls == "success"


@pytest.mark.parametrize("cascade", [
    GLOO.format(n=537, msg="Read error [127.0.0.1]:26794: Connection reset by peer"),
    "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
    "remote process exited or there was a network error, NCCL version 2.21.5\n",
])
def test_quiet_root_rank_makes_a_peer_cascade_no_class(tmp_path: Path, cascade: str) -> None:
    log = EPOCH_PROGRESS + cascade + ROOT_CAUSE.format(rank=2, code=3)
    v = job_verdict([task(tmp_path, log, exit_code=1)])
    assert v.cls == "unknown" and v.root_rank == 2, v.to_json()


def test_quiet_root_rank_by_exit_records(tmp_path: Path) -> None:
    r0 = task(tmp_path, EPOCH_PROGRESS + GLOO.format(
        n=537, msg="Connection closed by peer [10.0.0.3]:1234"), "0.0.log", rank=0,
        step="0", exit_code=1, end_time=110.0, node="n1")
    r1 = task(tmp_path, EPOCH_PROGRESS, "0.1.log", rank=1, step="0", exit_code=3, end_time=100.0,
              node="n2")
    v = job_verdict([r0, r1], exit_code=1, slurm_state="FAILED")
    assert v.cls == "unknown" and v.root_rank == 1, v.to_json()


def test_cascade_of_the_first_failed_rank_itself_still_counts(tmp_path: Path) -> None:
    log = EPOCH_PROGRESS + "[rank2]: RuntimeError: NCCL communicator was aborted on rank 2.\n" \
        + ROOT_CAUSE.format(rank=2, code=1)
    v = job_verdict([task(tmp_path, log, exit_code=1)])
    assert v.cls == "nccl_error" and v.root_rank == 2


# ---- a failed step the script recovered from, job COMPLETED exit 0 ----

@pytest.mark.parametrize("codes", [[1, 0], [1, 1, 0], [2, 0, 0]])
def test_completed_job_that_retried_a_failed_step_is_success(tmp_path: Path,
                                                             codes: list[int]) -> None:
    v = job_verdict(_steps(tmp_path, codes), exit_code=0, slurm_state="COMPLETED")
    assert v.cls == "success", v.to_json()
    assert "step 0 had failed" in v.detail


def test_last_step_failed_stays_a_failure_even_if_the_script_exits_0(tmp_path: Path) -> None:
    v = job_verdict(_steps(tmp_path, [0, 1]), exit_code=0, slurm_state="COMPLETED")
    assert v.cls != "success", v.to_json()


def test_failed_step_with_job_failed_is_a_failure(tmp_path: Path) -> None:
    v = job_verdict(_steps(tmp_path, [1, 0]), exit_code=1, slurm_state="FAILED")
    assert v.cls != "success"


# ---- a worker that vanished, and the OOM killer's report ----

@pytest.mark.parametrize("lost", WORKER_LOST)
@pytest.mark.parametrize("oom", OOM_LINES)
def test_worker_lost_with_oom_evidence_in_the_batch_log_is_host_oom(
        tmp_path: Path, lost: str, oom: str) -> None:
    step = task(tmp_path, EPOCH_PROGRESS + RUN_TB + lost, "0.0.log", step="0", exit_code=1,
                end_time=100.0, node="n4")
    batch = task(tmp_path, EPOCH_PROGRESS + RUN_TB + lost + oom, "batch.0.log", step="batch",
                 exit_code=1, end_time=101.0, node="n4")
    v = job_verdict([step, batch], exit_code=1, slurm_state="FAILED")
    # srun's "Out Of Memory" is a cause by itself when the worker's line is only a symptom
    # (or Slurm's own count of OOM kills as its verdict: host_oom_state)
    assert v.cls == "host_oom" and v.decided_by in ("worker_oom", "log_root", "host_oom_state"), \
        v.to_json()


def test_worker_lost_with_a_kernel_oom_kill_is_host_oom(tmp_path: Path) -> None:
    kern = tmp_path / "kern.log"
    kern.write_text("[81234.5] Memory cgroup out of memory: Killed process 3321 (pt_data_worker)"
                    " total-vm:9123456kB, anon-rss:8123456kB\n")
    v = job_verdict([task(tmp_path, EPOCH_PROGRESS + RUN_TB + WORKER_LOST[0])],
                    kernel_log=str(kern))
    assert v.cls == "host_oom"


@pytest.mark.parametrize("lost,cls", [(WORKER_LOST[0], "dataloader_worker"),
                                      (WORKER_LOST[1], "dataloader_worker")])
def test_worker_lost_without_oom_evidence_keeps_its_class(tmp_path: Path, lost: str,
                                                          cls: str) -> None:
    assert job_verdict([task(tmp_path, EPOCH_PROGRESS + RUN_TB + lost)]).cls == cls


def test_oom_evidence_does_not_override_an_unrelated_cause(tmp_path: Path) -> None:
    step = task(tmp_path, EPOCH_PROGRESS + RUN_TB + "KeyError: 'label'\n", "0.0.log", step="0",
                end_time=100.0, node="n4")
    batch = task(tmp_path, EPOCH_PROGRESS + OOM_LINES[0], "batch.0.log", step="batch",
                 end_time=101.0, node="n4")
    v = job_verdict([step, batch], exit_code=1, slurm_state="FAILED")
    assert v.cls == "python_exception"


def test_worker_oom_step_and_its_symptoms_are_data() -> None:
    steps = load_precedence()
    assert steps.index("host_oom_state") < steps.index("worker_oom") < steps.index("log_root")


# ---- an exception line inside a bold or code span in prose ----

@pytest.mark.parametrize("line,body", [
    ("So the run died with **FileNotFoundError: [Errno 2] No such file or directory: "
     "'/data/a.bin'** and nothing else.",
     "FileNotFoundError: [Errno 2] No such file or directory: '/data/a.bin'"),
    ("we hit `torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB` "
     "again", "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("[rank3]: it ended in ``KeyError: 'input_ids'`` at step 40",
     "KeyError: 'input_ids'"),
])
def test_exception_span_in_prose_is_read_as_the_line(line: str, body: str) -> None:
    v = line_view(line)
    assert v.body == body
    if line.startswith("[rank3]"):
        assert v.rank == 3


@pytest.mark.parametrize("line", [
    "the `ValueError` class is raised for bad input",
    "set `config.model: resnet` in the file",
    "The important part is **it 327 epoch 8 loss 0.00610** as far as I can tell.",
])
def test_benign_spans_in_prose_stay_prose(line: str) -> None:
    v = line_view(line)
    assert v.body.startswith(line.split()[0])


@pytest.mark.parametrize("quote,cls", [
    ("The log says **FileNotFoundError: [Errno 2] No such file or directory: "
     "'/data/shards/train-0004.tar'** right before it stopped.", "file_not_found"),
    ("It ended with `torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. "
     "GPU 0 has a total capacity of 79.15 GiB` on the second node.", "cuda_oom"),
    ("The real error is **PermissionError: [Errno 13] Permission denied: '/scratch/ckpt'**.",
     "permission_denied"),
])
def test_exception_in_prose_decides(tmp_path: Path, quote: str, cls: str) -> None:
    log = "Here is what happened on the cluster.\n" + quote + "\nThanks!\n"
    v = job_verdict([task(tmp_path, log, exit_code=1)])
    assert v.cls == cls, v.to_json()


# ---- an exception logged as the end of the work, exit 0 ----

def test_error_giving_up_and_traceback_at_end_is_its_class_on_exit0(tmp_path: Path) -> None:
    log = LOOP_PROGRESS + "ERROR shard 4 failed, giving up\n" + PREP_TB + "KeyError: 'user_id'\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "python_exception" and v.silent_failure and v.decided_by == "abandoned"
    assert v.detail.startswith("the job exited 0, but:")


def test_abandoned_keeps_the_exceptions_own_class(tmp_path: Path) -> None:
    log = (LOOP_PROGRESS + PREP_TB
           + "FileNotFoundError: [Errno 2] No such file or directory: 'v.txt'\n"
           + "CRITICAL cannot continue without a vocabulary, exiting\n")
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "file_not_found" and v.silent_failure


def test_traceback_logged_and_work_went_on_is_success(tmp_path: Path) -> None:
    log = (LOOP_PROGRESS + "ERROR shard 4 unreadable, giving up on it\n" + PREP_TB
           + "ValueError: bad row\n" + LOOP_PROGRESS)
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success" and not v.silent_failure


def test_traceback_at_end_without_a_giving_up_line_stays_success(tmp_path: Path) -> None:
    # "Exception ignored in ..." tracebacks at interpreter exit are common and harmless
    log = LOOP_PROGRESS + "Exception ignored in: <function Pool.__del__>\n" + PREP_TB + \
        "OSError: handle is closed\n"
    v = job_verdict([task(tmp_path, log, exit_code=0)])
    assert v.cls == "success"


def test_abandoned_is_a_precedence_step_before_clean_exit() -> None:
    steps = load_precedence()
    assert steps.index("silent_failure") < steps.index("abandoned") < steps.index("clean_exit")


# ---- exit 0 after an error printed with its stack, then a line saying the work stopped ----

@pytest.mark.parametrize("stop", [
    "ERROR: could not load the shard index, giving up",
    "export failed, exiting",
    "FATAL: cannot continue without a manifest; aborting",
])
def test_js_error_with_its_stack_then_a_stop_line_on_exit0(tmp_path: Path, stop: str) -> None:
    text = ("loading 24 shards\nTypeError: Cannot read properties of undefined (reading 'path')\n"
            + JS_STACK + stop + "\n")
    v = verdict(tmp_path, text, exit_code=0)
    assert (v.cls, v.silent_failure) == ("python_exception", True), (v.cls, v.detail)


def test_jvm_stack_then_a_stop_line_on_exit0(tmp_path: Path) -> None:
    frames = "".join(f"\tat org.etl.Stage{i}.run(Stage{i}.java:{20 + i})\n" for i in range(12))
    text = ("stage 3\njava.lang.IllegalStateException: empty partition list\n" + frames
            + "ERROR stage 3 failed, giving up\n")
    v = verdict(tmp_path, text, exit_code=0)
    assert (v.cls, v.silent_failure) == ("python_exception", True), (v.cls, v.detail)


@pytest.mark.parametrize("tail", [
    # the error was caught and the work went on: more lines of work after the stop-less line
    "attempt 1 failed, retrying with the backup config\nattempt 2: parsed\nexported 24 shards, "
    "0 errors\n",
    # a stop line, but the work went on long after it
    "ERROR: shard 3 unreadable, giving up on it\n" + "".join(f"exported shard {i}\n"
                                                            for i in range(4, 20)),
])
def test_caught_js_error_and_work_that_went_on_stays_success(tmp_path: Path, tail: str) -> None:
    text = "SyntaxError: Unexpected end of JSON input\n    at JSON.parse (<anonymous>)\n" + JS_STACK
    v = verdict(tmp_path, text + tail, exit_code=0)
    assert v.cls == "success", (v.cls, v.detail)


def test_stop_line_after_unrelated_lines_is_not_the_errors_end(tmp_path: Path) -> None:
    # the lines between the error and the stop line are work, not its stack
    text = ("TypeError: x is undefined\n    at f (/a.js:1:2)\nprocessing shard 4\nprocessing "
            "shard 5\nprocessing shard 6\nprocessing shard 7\nprocessing shard 8\nprocessing "
            "shard 9\nprocessing shard 10\nprocessing shard 11\nERROR: quota reached, giving up\n")
    v = verdict(tmp_path, text, exit_code=0)
    assert v.cls == "success", (v.cls, v.detail)


def test_precedence_is_data_and_checked():
    ids = load_precedence()
    assert ids.index("hardware") < ids.index("log_root") < ids.index("signal")
    assert ids[-1] == "unknown"
    with pytest.raises(RuleError, match="precedence.yaml: field 'steps': unknown step id"):
        load_precedence("steps:\n  - id: hardware\n  - id: no_such_step\n  - id: unknown\n")
    with pytest.raises(RuleError, match="each step once"):
        load_precedence("steps: [hardware, hardware, unknown]\n")
